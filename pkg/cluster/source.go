package cluster

import (
	"context"
	"errors"
	"fmt"
	"net/url"
)

// Source answers the plugin's queries: the agents through kube-apiserver
// (Client) or the store they share (ESSource).
type Source interface {
	Who(ctx context.Context, namespace, pod, container string, q url.Values, limit int, processes bool) (WhoAnswer, error)
	Sessions(ctx context.Context, q url.Values, limit int) (Answer[Session], error)
	Session(ctx context.Context, auditID string) (Answer[SessionView], error)
	Alerts(ctx context.Context, q url.Values, limit int) (Answer[Alert], error)
}

// Selecting answers for the pods a label selector picks: the pods come
// from kube-apiserver, and only the agents behind them are asked. Only
// Client is one.
type Selecting interface {
	SelectPods(ctx context.Context, namespace, selector string) (Selection, error)
	SessionsIn(ctx context.Context, sel Selection, q url.Values, limit int) (Answer[Session], error)
	WhoIn(ctx context.Context, sel Selection, container string, q url.Values, limit int, processes bool) (WhoInAnswer, error)
	AlertsIn(ctx context.Context, sel Selection, q url.Values, limit int) (Answer[Alert], error)
}

// ErrSelectorES: a store has no pods to select.
var ErrSelectorES = errors.New("selecting pods with -l: not supported with --elasticsearch")

// Query is one listing: the API's filters, at most Limit rows and, with
// Selector, only the pods it matches now in Namespace ("": every
// namespace).
type Query struct {
	Filters             url.Values
	Limit               int
	Selector, Namespace string
}

// Filter sets each non-empty value of kv as a filter of q.
func (q Query) Filter(kv map[string]string) Query {
	for k, v := range kv {
		if v != "" {
			q.Filters.Set(k, v)
		}
	}
	return q
}

// CheckSelector refuses a bad selector, or one with Elasticsearch (a
// store has no pods to select), before anything is asked.
func CheckSelector(selector string, elasticsearch bool) error {
	switch {
	case selector == "":
		return nil
	case elasticsearch:
		return ErrSelectorES
	}
	_, err := ParseSelector(selector)
	return err
}

// Asker asks a Source the plugin's listings, narrowed to a selector's
// pods when the query has one.
type Asker struct {
	src Source
	// note says what was left unasked (no pod matched, a selected pod on
	// no node): the caller's stderr.
	note func(string)
}

// NewAsker asks src; note receives what was left unasked.
func NewAsker(src Source, note func(string)) *Asker { return &Asker{src: src, note: note} }

// selecting lists the pods q's selector matches; src must be Selecting.
func (a *Asker) selecting(ctx context.Context, q Query) (Selecting, Selection, error) {
	ss, ok := a.src.(Selecting)
	if !ok {
		return nil, Selection{}, ErrSelectorES
	}
	sel, err := ss.SelectPods(ctx, q.Namespace, q.Selector)
	if err != nil {
		return nil, sel, err
	}
	if len(sel.Pods) == 0 {
		where := "any namespace"
		if q.Namespace != "" {
			where = "namespace " + q.Namespace
		}
		a.note(fmt.Sprintf("no pods in %s match %q", where, q.Selector))
	}
	return ss, sel, nil
}

// Sessions is the sessions q asks for, merged newest first.
func (a *Asker) Sessions(ctx context.Context, q Query) (Answer[Session], error) {
	if q.Selector == "" {
		return a.src.Sessions(ctx, q.Filters, q.Limit)
	}
	ss, sel, err := a.selecting(ctx, q)
	if err != nil {
		return Answer[Session]{}, err
	}
	return ss.SessionsIn(ctx, sel, q.Filters, q.Limit)
}

// Alerts is the alerts q asks for, merged newest first.
func (a *Asker) Alerts(ctx context.Context, q Query) (Answer[Alert], error) {
	if q.Selector == "" {
		return a.src.Alerts(ctx, q.Filters, q.Limit)
	}
	ss, sel, err := a.selecting(ctx, q)
	if err != nil {
		return Answer[Alert]{}, err
	}
	return ss.AlertsIn(ctx, sel, q.Filters, q.Limit)
}

// Who is who exec'd into pod (container narrows it), with each session's
// processes when processes is set.
func (a *Asker) Who(ctx context.Context, pod, container string, q Query, processes bool) (WhoAnswer, error) {
	return a.src.Who(ctx, q.Namespace, pod, container, q.Filters, q.Limit, processes)
}

// WhoIn is who exec'd into the pods q's selector matches; the selected
// pods on no node are noted as skipped.
func (a *Asker) WhoIn(ctx context.Context, container string, q Query, processes bool) (WhoInAnswer, error) {
	ss, sel, err := a.selecting(ctx, q)
	if err != nil {
		return WhoInAnswer{}, err
	}
	ans, err := ss.WhoIn(ctx, sel, container, q.Filters, q.Limit, processes)
	if err != nil {
		return ans, err
	}
	for _, p := range ans.Skipped {
		a.note(fmt.Sprintf("pod %s/%s is on no node: skipped", p.Namespace, p.Name))
	}
	return ans, nil
}

// Session is auditID's session from every node that holds it.
func (a *Asker) Session(ctx context.Context, auditID string) (Answer[SessionView], error) {
	return a.src.Session(ctx, auditID)
}

// Missing is why ans holds no session: nil when it holds one; the
// answer's Incomplete when nodes that did not answer may hold it (a
// partial answer notes so); else not found.
func (a *Asker) Missing(ans Answer[SessionView], auditID string) error {
	if len(ans.Items) > 0 {
		return nil
	}
	if err := ans.Incomplete(); err != nil {
		if errors.Is(err, ErrPartial) {
			a.note(fmt.Sprintf("session %s: not on any node that answered", auditID))
		}
		return err
	}
	return fmt.Errorf("finding session %s: not on any of %d nodes", auditID, ans.Nodes)
}
