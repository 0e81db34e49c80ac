package cluster

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/url"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/store"
)

// PodRef is one pod a label selector picked, and its node ("" when it is
// not scheduled).
type PodRef struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Node      string `json:"node,omitempty"`
}

// Selection is the pods a label selector matches now, in one namespace
// or all ("" Namespace). Only live pods have labels: sessions into pods
// that no longer exist can never be selected.
type Selection struct {
	Selector  string   `json:"selector"`
	Namespace string   `json:"namespace,omitempty"`
	Pods      []PodRef `json:"pods"`
	set       map[[2]string]bool
}

// Has reports whether namespace/pod is one of the selected pods.
func (s *Selection) Has(namespace, pod string) bool { return s.set[[2]string{namespace, pod}] }

// ParseSelector checks a label selector in kubectl's syntax.
func ParseSelector(selector string) (labels.Selector, error) {
	sel, err := labels.Parse(selector)
	if err != nil {
		return nil, fmt.Errorf("parsing label selector %q: %w", selector, err)
	}
	return sel, nil
}

// SelectPods lists the pods matching selector in namespace ("": every
// namespace), sorted by namespace and name.
func (c *Client) SelectPods(ctx context.Context, namespace, selector string) (Selection, error) {
	s := Selection{Selector: selector, Namespace: namespace, Pods: []PodRef{}, set: map[[2]string]bool{}}
	sel, err := ParseSelector(selector)
	if err != nil {
		return s, err
	}
	pods, err := c.core.Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return s, fmt.Errorf("listing pods in %s matching %q: %w", cmp.Or(namespace, "all namespaces"), selector, err)
	}
	for _, p := range pods.Items {
		s.Pods = append(s.Pods, PodRef{Namespace: p.Namespace, Name: p.Name, Node: p.Spec.NodeName})
		s.set[[2]string{p.Namespace, p.Name}] = true
	}
	slices.SortFunc(s.Pods, func(a, b PodRef) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	c.log.Debug().Str("selector", selector).Int("pods", len(s.Pods)).Msg("pods selected")
	return s, nil
}

// SessionsIn is Sessions kept to the sessions into the selected pods
// (namespace and name). Every agent is asked: a pod's earlier
// incarnations may have run on other nodes.
func (c *Client) SessionsIn(ctx context.Context, sel Selection, q url.Values, limit int) (Answer[Session], error) {
	limit = cmp.Or(limit, 100)
	if len(sel.Pods) == 0 {
		return Answer[Session]{Items: []Session{}}, nil
	}
	q = cloneValues(q)
	if sel.Namespace != "" {
		q.Set("namespace", sel.Namespace)
	}
	keep := func(s *join.Session) bool { return sel.Has(s.Namespace, s.Pod) }
	m := sessionMerger(limit)
	ans, err := fanOutAll(ctx, c, func(ctx context.Context, a Agent) ([]Session, error) {
		items, err := pagesWhere(ctx, c, a, "api/v1/sessions", q, limit, keep)
		return nodeItems(a, items), err
	}, m.add)
	if err != nil {
		return ans, err
	}
	ans.Items, ans.Truncated = m.result()
	return ans, nil
}

// WhoInAnswer is who exec'd into the selected pods.
type WhoInAnswer struct {
	Answer[Session]
	Selection
	// Skipped are the selected pods on no node: not asked.
	Skipped []PodRef `json:"skipped,omitempty"`
}

// WhoIn asks the agents on the selected pods' nodes, and only those, for
// the sessions into those pods; pods on no node are skipped.
func (c *Client) WhoIn(ctx context.Context, sel Selection, container string, q url.Values, limit int,
	processes bool) (WhoInAnswer, error) {
	limit = cmp.Or(limit, 100)
	ans := WhoInAnswer{Selection: sel}
	ans.Items = []Session{}
	byNode := map[string][]PodRef{}
	for _, p := range sel.Pods {
		if p.Node == "" {
			ans.Skipped = append(ans.Skipped, p)
			continue
		}
		byNode[p.Node] = append(byNode[p.Node], p)
	}
	agents, missing := c.agentsOn(ctx, slices.Sorted(maps.Keys(byNode)))
	ans.fail(missing...)
	ans.Nodes = len(byNode)
	m := sessionMerger(limit)
	fails := fanOut(ctx, c, agents, func(ctx context.Context, a Agent) ([]Session, error) {
		var out []Session
		for _, p := range byNode[a.Node] {
			pq := cloneValues(q)
			pq.Set("namespace", p.Namespace)
			pq.Set("pod", p.Name)
			if container != "" {
				pq.Set("container", container)
			}
			items, err := c.nodeSessions(ctx, a, pq, limit, processes)
			if err != nil {
				return nil, err
			}
			out = append(out, items...)
		}
		return out, nil
	}, m.add)
	ans.fail(fails...)
	slices.SortFunc(ans.Unreachable, func(a, b Failure) int { return cmp.Compare(a.Node, b.Node) })
	ans.Items, ans.Truncated = m.result()
	return ans, nil
}

// AlertsIn is Alerts kept to the alerts about the selected pods: the pod
// of the alert's session, or else of its process, as its payload
// records them. An alert whose payload names no pod is left out.
func (c *Client) AlertsIn(ctx context.Context, sel Selection, q url.Values, limit int) (Answer[Alert], error) {
	if len(sel.Pods) == 0 {
		return Answer[Alert]{Items: []Alert{}}, nil
	}
	return c.alerts(ctx, q, limit, func(a *store.Alert) bool {
		ns, pod := AlertPod(a)
		return pod != "" && sel.Has(ns, pod)
	})
}

// AlertPod is the pod an alert is about, from its payload (pkg/alert's
// Input): its session's pod, or else its process's; empty when the
// payload names none.
func AlertPod(a *store.Alert) (namespace, pod string) {
	var in struct {
		Session *join.Session `json:"session"`
		Process *join.Process `json:"process"`
	}
	if len(a.Payload) == 0 || json.Unmarshal(a.Payload, &in) != nil {
		return "", ""
	}
	if in.Session != nil && in.Session.Pod != "" {
		return in.Session.Namespace, in.Session.Pod
	}
	if in.Process != nil {
		return in.Process.Namespace, in.Process.Pod
	}
	return "", ""
}

func nodeItems(a Agent, items []join.Session) []Session {
	out := make([]Session, len(items))
	for i := range items {
		out[i] = Session{Nodes: []string{a.Node}, Session: items[i]}
	}
	return out
}
