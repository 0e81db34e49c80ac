package cluster

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/execid/correlator/pkg/api"
	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/store"
)

// ESSource answers the plugin's queries from the Elasticsearch store
// every agent writes: one query, no fan-out, and no node names (the store
// does not keep them).
type ESSource struct {
	r   api.Reader
	now func() time.Time
}

// NewESSource answers from r; now places since and until given as
// durations, and says which processes still wait (api.Served).
func NewESSource(r api.Reader, now func() time.Time) *ESSource {
	return &ESSource{r: r, now: now}
}

// window reads since and until as the agents do: RFC 3339 or a duration
// ago.
func (e *ESSource) window(q url.Values) (since, until time.Time, err error) {
	parse := func(s string) (time.Time, error) {
		if s == "" {
			return time.Time{}, nil
		}
		if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
			return t, nil
		}
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 {
			return time.Time{}, fmt.Errorf("parsing %q: neither RFC 3339 nor a duration such as 24h", s)
		}
		return e.now().Add(-d), nil
	}
	if since, err = parse(q.Get("since")); err != nil {
		return since, until, err
	}
	until, err = parse(q.Get("until"))
	return since, until, err
}

// esPages follows the store's cursors up to limit items.
func esPages[T any](limit int, fetch func(cursor string, n int) ([]T, string, error)) ([]T, bool, error) {
	var out []T
	cursor := ""
	for {
		items, next, err := fetch(cursor, min(limit-len(out), 500))
		if err != nil {
			return nil, false, err
		}
		out = append(out, items...)
		if next == "" || len(items) == 0 {
			return out, false, nil
		}
		if len(out) >= limit {
			return out[:limit], true, nil
		}
		cursor = next
	}
}

func (e *ESSource) Sessions(ctx context.Context, q url.Values, limit int) (Answer[Session], error) {
	var ans Answer[Session]
	since, until, err := e.window(q)
	if err != nil {
		return ans, err
	}
	limit = cmp.Or(limit, 100)
	items, more, err := esPages(limit, func(cursor string, n int) ([]join.Session, string, error) {
		return e.r.ListSessions(ctx, store.SessionFilter{User: q.Get("user"), Group: q.Get("group"),
			Namespace: q.Get("namespace"), Pod: q.Get("pod"), Container: q.Get("container"), Command: q.Get("command"),
			Since: since, Until: until, Limit: n, Cursor: cursor})
	})
	if err != nil {
		return ans, fmt.Errorf("querying Elasticsearch: %w", err)
	}
	for _, s := range items {
		ans.Items = append(ans.Items, Session{Nodes: []string{}, Session: s})
	}
	ans.Truncated = more
	return ans, nil
}

func (e *ESSource) Who(ctx context.Context, namespace, pod, container string, q url.Values, limit int,
	processes bool) (WhoAnswer, error) {
	q2 := url.Values{}
	for k, v := range q {
		q2[k] = v
	}
	q2.Set("namespace", namespace)
	q2.Set("pod", pod)
	if container != "" {
		q2.Set("container", container)
	}
	ans := WhoAnswer{Namespace: namespace, Pod: pod}
	var err error
	if ans.Answer, err = e.Sessions(ctx, q2, limit); err != nil {
		return ans, err
	}
	since, _ := time.ParseDuration(pendingSince)
	recent, _, err := e.r.ListProcesses(ctx, store.ProcessFilter{Namespace: namespace, Pod: pod, Container: container,
		Since: e.now().Add(-since), Limit: pendingScan})
	if err != nil {
		return ans, fmt.Errorf("querying Elasticsearch for the pending processes of %s/%s: %w", namespace, pod, err)
	}
	api.Served(recent, e.now())
	ans.Pending = pendingOf(recent)
	if !processes {
		return ans, nil
	}
	for i := range ans.Items {
		id := ans.Items[i].AuditID
		ans.Items[i].Processes, _, err = esPages(500, func(cursor string, n int) ([]join.Process, string, error) {
			return e.r.ListProcesses(ctx, store.ProcessFilter{AuditID: id, Limit: n, Cursor: cursor})
		})
		if err != nil {
			return ans, fmt.Errorf("querying Elasticsearch for the processes of %s: %w", id, err)
		}
		api.Served(ans.Items[i].Processes, e.now())
	}
	return ans, nil
}

func (e *ESSource) Session(ctx context.Context, auditID string) (Answer[SessionView], error) {
	var ans Answer[SessionView]
	d, err := e.r.GetSession(ctx, auditID)
	if errors.Is(err, store.ErrNotFound) {
		return ans, nil
	}
	if err != nil {
		return ans, fmt.Errorf("querying Elasticsearch: %w", err)
	}
	ans.Items = []SessionView{{Nodes: []string{}, SessionView: api.NewSessionView(d, e.now())}}
	return ans, nil
}

func (e *ESSource) Alerts(ctx context.Context, q url.Values, limit int) (Answer[Alert], error) {
	var ans Answer[Alert]
	since, until, err := e.window(q)
	if err != nil {
		return ans, err
	}
	items, more, err := esPages(cmp.Or(limit, 100), func(cursor string, n int) ([]store.Alert, string, error) {
		return e.r.ListAlerts(ctx, store.AlertFilter{Rule: q.Get("rule"), Severity: q.Get("severity"),
			AuditID: q.Get("auditID"), Since: since, Until: until, Limit: n, Cursor: cursor})
	})
	if err != nil {
		return ans, fmt.Errorf("querying Elasticsearch: %w", err)
	}
	for _, a := range items {
		ans.Items = append(ans.Items, Alert{Nodes: []string{}, Alert: a})
	}
	ans.Truncated = more
	return ans, nil
}
