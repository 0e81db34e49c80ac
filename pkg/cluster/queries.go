package cluster

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/execid/correlator/pkg/api"
	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/store"
)

// maxPage is the page size asked of each agent.
const maxPage = 500

// Session is a session and the nodes whose agents hold it; Processes are
// its processes when asked for (Who with processes).
type Session struct {
	Nodes []string `json:"nodes"`
	join.Session
	Processes []join.Process `json:"processes,omitempty"`
}

// SessionView is a session's detail and process tree, and the nodes that
// answered it. An audit ID replayed on two nodes gives two views.
type SessionView struct {
	Nodes []string `json:"nodes"`
	api.SessionView
}

// Alert is an alert and the nodes that raised or hold it.
type Alert struct {
	Nodes []string `json:"nodes"`
	store.Alert
}

// Sessions asks every agent for sessions matching q (the API's filters:
// user, group, namespace, pod, container, command, since, until) and
// merges them, newest first, at most limit (0: 100).
func (c *Client) Sessions(ctx context.Context, q url.Values, limit int) (Answer[Session], error) {
	limit = cmp.Or(limit, 100)
	m := sessionMerger(limit)
	ans, err := fanOutAll(ctx, c, func(ctx context.Context, a Agent) ([]Session, error) {
		return c.nodeSessions(ctx, a, q, limit, false)
	}, m.add)
	if err != nil {
		return ans, err
	}
	ans.Items, ans.Truncated = m.result()
	return ans, nil
}

// WhoAnswer is who exec'd into one pod.
type WhoAnswer struct {
	Answer[Session]
	Namespace string `json:"namespace"`
	Pod       string `json:"pod"`
	// Node is the pod's node; empty when the pod is gone and every node
	// was asked.
	Node string `json:"node,omitempty"`
	// Pending are the pod's newest processes whose attribution may still
	// change (an exec root waiting for its record has no session yet):
	// who ran them is not known yet, which is not nobody.
	Pending []join.Process `json:"pending,omitempty"`
}

// Who reads the newest pendingScan processes of the pod, of the last
// pendingSince, for those still pending: a pending process is a new one
// (its wait is a minute, the pending TTL at most).
const (
	pendingScan  = 500
	pendingSince = "10m"
)

// pendingOf keeps the processes the agent served as pending.
func pendingOf(ps []join.Process) []join.Process {
	var out []join.Process
	for _, p := range ps {
		if p.Pending {
			out = append(out, p)
		}
	}
	return out
}

// Who asks the agent on pod's node for the sessions opened into it
// (container narrows them), with each session's processes when
// processes is set. A pod that no longer exists is looked for on every
// node: an incident is often investigated after the pod is gone.
func (c *Client) Who(ctx context.Context, namespace, pod, container string, q url.Values, limit int,
	processes bool) (WhoAnswer, error) {
	limit = cmp.Or(limit, 100)
	ans := WhoAnswer{Namespace: namespace, Pod: pod}
	q = cloneValues(q)
	q.Set("namespace", namespace)
	q.Set("pod", pod)
	if container != "" {
		q.Set("container", container)
	}
	each := func(ctx context.Context, a Agent) ([]Session, error) {
		return c.nodeSessions(ctx, a, q, limit, processes)
	}
	node, found, err := c.PodNode(ctx, namespace, pod)
	if err != nil {
		return ans, err
	}
	m := sessionMerger(limit)
	if !found || node == "" {
		c.log.Debug().Str("pod", namespace+"/"+pod).Bool("found", found).Msg("pod not on a node: asking every node")
		a, err := fanOutAll(ctx, c, each, m.add)
		if err != nil {
			return ans, err
		}
		ans.Answer = a
		ans.Items, ans.Truncated = m.result()
		return ans, nil
	}
	ans.Node, ans.Nodes = node, 1
	agent, err := c.AgentOn(ctx, node)
	if err != nil {
		ans.fail(Failure{Node: node, Error: err.Error()})
		return ans, nil
	}
	fails := fanOut(ctx, c, []Agent{agent}, each, m.add)
	ans.fail(fails...)
	ans.Items, ans.Truncated = m.result()
	if len(fails) > 0 {
		return ans, nil // the node did not answer: it has said so once
	}
	pq := url.Values{"namespace": {namespace}, "pod": {pod}, "since": {pendingSince}}
	if container != "" {
		pq.Set("container", container)
	}
	if ps, err := pages[join.Process](ctx, c, agent, "api/v1/processes", pq, pendingScan); err == nil {
		ans.Pending = pendingOf(ps)
	} else {
		ans.fail(Failure{Node: node, Error: "reading pending processes: " + err.Error()})
	}
	return ans, nil
}

// Session asks every agent for one session; each node that holds it
// answers its own view (404 means it does not), and identical views (a
// shared store) are merged.
func (c *Client) Session(ctx context.Context, auditID string) (Answer[SessionView], error) {
	if auditID == "" || strings.ContainsAny(auditID, "/?#") || auditID == "." || auditID == ".." {
		return Answer[SessionView]{}, fmt.Errorf("validating audit ID %q: not an audit ID", auditID)
	}
	var views []SessionView // one a node at most
	ans, err := fanOutAll(ctx, c, func(ctx context.Context, a Agent) ([]SessionView, error) {
		var v api.SessionView
		err := c.get(ctx, a, "api/v1/sessions/"+auditID, nil, &v)
		if errors.Is(err, ErrNotFound) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		return []SessionView{{Nodes: []string{a.Node}, SessionView: v}}, nil
	}, func(v []SessionView) { views = append(views, v...) })
	if err != nil {
		return ans, err
	}
	ans.Items = dedupe(views, func(v SessionView) any { return v.SessionView })
	slices.SortFunc(ans.Items, func(a, b SessionView) int { return cmp.Compare(a.Nodes[0], b.Nodes[0]) })
	return ans, nil
}

// Alerts asks every agent for alerts matching q (rule, severity,
// auditID, since, until) and merges them, newest first, at most limit.
func (c *Client) Alerts(ctx context.Context, q url.Values, limit int) (Answer[Alert], error) {
	return c.alerts(ctx, q, limit, nil)
}

// alerts is Alerts keeping only the alerts keep accepts (nil: all).
func (c *Client) alerts(ctx context.Context, q url.Values, limit int, keep func(*store.Alert) bool) (Answer[Alert], error) {
	limit = cmp.Or(limit, 100)
	m := alertMerger(limit)
	ans, err := fanOutAll(ctx, c, func(ctx context.Context, a Agent) ([]Alert, error) {
		items, err := pagesWhere(ctx, c, a, "api/v1/alerts", q, limit, keep)
		out := make([]Alert, len(items))
		for i := range items {
			out[i] = Alert{Nodes: []string{a.Node}, Alert: items[i]}
		}
		return out, err
	}, m.add)
	if err != nil {
		return ans, err
	}
	ans.Items, ans.Truncated = m.result()
	return ans, nil
}

// nodeSessions reads up to limit sessions from one agent, following its
// cursors, with their processes when asked.
func (c *Client) nodeSessions(ctx context.Context, a Agent, q url.Values, limit int, processes bool) ([]Session, error) {
	items, err := pages[join.Session](ctx, c, a, "api/v1/sessions", q, limit)
	if err != nil {
		return nil, err
	}
	out := make([]Session, len(items))
	for i := range items {
		out[i] = Session{Nodes: []string{a.Node}, Session: items[i]}
		if processes {
			pq := url.Values{"auditID": {items[i].AuditID}}
			if out[i].Processes, err = pages[join.Process](ctx, c, a, "api/v1/processes", pq, maxPage); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// pages follows an agent's cursors until it has limit items or no more.
func pages[T any](ctx context.Context, c *Client, a Agent, path string, q url.Values, limit int) ([]T, error) {
	return pagesWhere[T](ctx, c, a, path, q, limit, nil)
}

// pagesWhere is pages keeping only the items keep accepts (nil: all); it
// reads whole pages then, as most items may be left out, until it has
// limit items, the agent has no more, or the node's time is up. A node's
// answer is at most limit items, even from an agent that sends more
// than it was asked for.
func pagesWhere[T any](ctx context.Context, c *Client, a Agent, path string, q url.Values, limit int,
	keep func(*T) bool) ([]T, error) {
	q = cloneValues(q)
	var out []T
	for len(out) < limit {
		n := maxPage
		if keep == nil {
			n = min(limit-len(out), maxPage)
		}
		q.Set("limit", strconv.Itoa(n))
		var p api.Page[T]
		if err := c.get(ctx, a, path, q, &p); err != nil {
			return nil, err
		}
		for i := 0; i < len(p.Items) && len(out) < limit; i++ {
			if keep == nil || keep(&p.Items[i]) {
				out = append(out, p.Items[i])
			}
		}
		if p.NextCursor == "" || len(p.Items) == 0 {
			break
		}
		q.Set("cursor", p.NextCursor)
	}
	return out, nil
}

// nodeLister is a merged item that names its nodes.
type nodeLister[T any] interface {
	*T
	nodeList() *[]string
}

func (s *Session) nodeList() *[]string     { return &s.Nodes }
func (v *SessionView) nodeList() *[]string { return &v.Nodes }
func (a *Alert) nodeList() *[]string       { return &a.Nodes }

// dedupe keeps the first of items whose key encodes the same, with the
// later ones' nodes added to it.
func dedupe[T any, P nodeLister[T]](items []T, key func(T) any) []T {
	seen := map[string]int{}
	out := items[:0:0]
	for _, it := range items {
		b, err := json.Marshal(key(it))
		if err != nil {
			out = append(out, it)
			continue
		}
		if i, ok := seen[string(b)]; ok {
			n := P(&out[i]).nodeList()
			*n = append(*n, *P(&it).nodeList()...)
			continue
		}
		seen[string(b)] = len(out)
		out = append(out, it)
	}
	for i := range out {
		slices.Sort(*P(&out[i]).nodeList())
	}
	return out
}

func cloneValues(q url.Values) url.Values {
	out := url.Values{}
	for k, v := range q {
		out[k] = slices.Clone(v)
	}
	return out
}
