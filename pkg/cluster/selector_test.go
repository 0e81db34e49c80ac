package cluster

import (
	"encoding/json"
	"net/url"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/store"
)

// sessionNodes is each session as ID@nodes.
func sessionNodes(items []Session) []string {
	return ids(items, func(s Session) string { return s.AuditID + "@" + strings.Join(s.Nodes, ",") })
}

func TestSelectPods(t *testing.T) {
	d := cluster3(t)
	d.addPod("dev", "api-0", "node-a", "app=web")
	c := newClient(t, d, nil, nil)
	for _, tc := range []struct {
		ns, selector string
		want         []string
	}{
		{"prod", "app=web", []string{"prod/web-0@node-a", "prod/web-1@node-b"}},
		{"", "app=web", []string{"dev/api-0@node-a", "prod/web-0@node-a", "prod/web-1@node-b"}},
		{"prod", "app=web,track!=canary", []string{"prod/web-0@node-a"}},
		{"prod", "track in (stable, canary)", []string{"prod/web-0@node-a", "prod/web-1@node-b"}},
		{"", "app=nope", nil},
		{"dev", "track", nil},
	} {
		sel, err := c.SelectPods(t.Context(), tc.ns, tc.selector)
		if err != nil {
			t.Fatalf("%q in %q: %v", tc.selector, tc.ns, err)
		}
		got := ids(sel.Pods, func(p PodRef) string { return p.Namespace + "/" + p.Name + "@" + p.Node })
		if !slices.Equal(got, tc.want) {
			t.Errorf("%q in %q: got %v, want %v", tc.selector, tc.ns, got, tc.want)
		}
		for _, p := range sel.Pods {
			if !sel.Has(p.Namespace, p.Name) {
				t.Errorf("%q: Has(%s/%s) is false", tc.selector, p.Namespace, p.Name)
			}
		}
	}
	if _, err := c.SelectPods(t.Context(), "prod", "app in (web"); err == nil || !strings.Contains(err.Error(), "parsing label selector") {
		t.Errorf("a bad selector: got %v", err)
	}
}

func TestSessionsIn(t *testing.T) {
	d := cluster3(t)
	d.addPod("dev", "api-0", "node-a", "app=web")
	c := newClient(t, d, nil, nil)
	for _, tc := range []struct {
		ns, selector string
		limit        int
		want         []string
	}{
		{"prod", "track=stable", 100, []string{"replayed@node-a", "a2@node-a", "a1@node-a"}},
		// Cursors are followed past pages that hold no match (pageCap 2).
		{"prod", "track=stable", 2, []string{"replayed@node-a", "a2@node-a"}},
		{"prod", "app=web", 100, []string{"replayed@node-b", "replayed@node-a", "shared@node-a,node-b", "a2@node-a", "b1@node-b", "a1@node-a"}},
		// -A: dev/api-0 matches too; with -n prod it does not.
		{"", "app=web", 100, []string{"replayed@node-b", "replayed@node-a", "a3@node-a", "shared@node-a,node-b", "a2@node-a", "b1@node-b", "a1@node-a"}},
		{"", "app=nope", 100, nil},
	} {
		sel, err := c.SelectPods(t.Context(), tc.ns, tc.selector)
		if err != nil {
			t.Fatal(err)
		}
		d.proxied = nil
		ans, err := c.SessionsIn(t.Context(), sel, url.Values{}, tc.limit)
		if err != nil {
			t.Fatal(err)
		}
		if got := sessionNodes(ans.Items); !slices.Equal(got, tc.want) {
			t.Errorf("%q in %q (limit %d): got %v, want %v", tc.selector, tc.ns, tc.limit, got, tc.want)
		}
		if len(sel.Pods) == 0 && len(d.proxied) != 0 {
			t.Errorf("%q matches no pod, yet the agents were asked: %v", tc.selector, d.proxied)
		}
		if len(sel.Pods) > 0 && (!ans.Partial || !slices.Equal(unreachable(ans.Unreachable), []string{"node-c", "node-d"})) {
			t.Errorf("%q: want node-c and node-d unreachable, got %+v", tc.selector, ans.Unreachable)
		}
	}
	// The other filters still apply.
	sel, _ := c.SelectPods(t.Context(), "prod", "app=web")
	ans, err := c.SessionsIn(t.Context(), sel, url.Values{"user": {"alice"}}, 100)
	if err != nil {
		t.Fatal(err)
	}
	if got := sessionNodes(ans.Items); !slices.Equal(got, []string{"shared@node-a,node-b", "b1@node-b", "a1@node-a"}) {
		t.Errorf("app=web and user alice: got %v", got)
	}
}

func TestWhoIn(t *testing.T) {
	d := cluster3(t)
	d.addPod("dev", "api-0", "node-a", "app=web")
	d.addPod("dev", "api-9", "", "app=web") // not scheduled
	c := newClient(t, d, nil, nil)

	sel, err := c.SelectPods(t.Context(), "prod", "app=web")
	if err != nil {
		t.Fatal(err)
	}
	d.proxied = nil
	ans, err := c.WhoIn(t.Context(), sel, "", url.Values{}, 100, true)
	if err != nil {
		t.Fatal(err)
	}
	// web-1 runs on node-b: node-a's copy of "shared" (into web-1) is
	// not asked for.
	want := []string{"replayed@node-b", "replayed@node-a", "shared@node-b", "a2@node-a", "b1@node-b", "a1@node-a"}
	if got := sessionNodes(ans.Items); !slices.Equal(got, want) || ans.Nodes != 2 || ans.Partial || len(ans.Skipped) != 0 {
		t.Errorf("who -l app=web -n prod: got %v (nodes %d, partial %v, skipped %v), want %v", got, ans.Nodes, ans.Partial, ans.Skipped, want)
	}
	if slices.ContainsFunc(d.proxied, func(p string) bool { return !strings.Contains(p, "node-a") && !strings.Contains(p, "node-b") }) {
		t.Errorf("asked %v, want only node-a and node-b", d.proxied)
	}
	if i := slices.IndexFunc(ans.Items, func(s Session) bool { return s.AuditID == "a1" }); len(ans.Items[i].Processes) != 2 {
		t.Errorf("a1's processes: got %d, want 2", len(ans.Items[i].Processes))
	}

	// A pod on no node is skipped and named; only node-a is asked.
	sel, _ = c.SelectPods(t.Context(), "dev", "app=web")
	d.proxied = nil
	ans, err = c.WhoIn(t.Context(), sel, "", nil, 100, false)
	if err != nil {
		t.Fatal(err)
	}
	if got := sessionNodes(ans.Items); !slices.Equal(got, []string{"a3@node-a"}) || ans.Nodes != 1 ||
		len(ans.Skipped) != 1 || ans.Skipped[0].Name != "api-9" {
		t.Errorf("who -l app=web -n dev: got %v (nodes %d, skipped %+v)", got, ans.Nodes, ans.Skipped)
	}
	if slices.ContainsFunc(d.proxied, func(p string) bool { return !strings.Contains(p, "node-a") }) {
		t.Errorf("asked %v, want only node-a", d.proxied)
	}

	// A matching pod on a node whose agent cannot answer: partial.
	d.addPod("prod", "web-2", "node-c", "app=web")
	sel, _ = c.SelectPods(t.Context(), "prod", "app=web")
	ans, err = c.WhoIn(t.Context(), sel, "", nil, 100, false)
	if err != nil || !ans.Partial || !slices.Equal(unreachable(ans.Unreachable), []string{"node-c"}) || ans.Nodes != 3 {
		t.Errorf("a pod on node-c: %+v %v", ans, err)
	}
}

func payload(t *testing.T, v any) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestAlertsIn(t *testing.T) {
	d := newAPIServerDouble(t)
	d.nodes = []string{"node-a"}
	s := sess("s1", "prod", "web-0", "alice", 1)
	p := proc("s2", 7)
	p.Namespace, p.Pod = "prod", "web-1"
	other := sess("s3", "prod", "db-0", "bob", 2)
	d.addAgent("node-a", &nodeStore{pageCap: 1, alerts: []store.Alert{
		{ID: "on-session", Time: t0, Rule: "shell", AuditID: "s1",
			Payload: payload(t, map[string]any{"session": s})},
		{ID: "on-process", Time: t0.Add(-1), Rule: "shadow", ProcessID: p.ProcessID,
			Payload: payload(t, map[string]any{"process": p})},
		{ID: "other-pod", Time: t0.Add(-2), Rule: "shell", AuditID: "s3",
			Payload: payload(t, map[string]any{"session": other, "process": join.Process{Namespace: "prod", Pod: "web-0"}})},
		{ID: "no-payload", Time: t0.Add(-3), Rule: "shell", AuditID: "s1"},
	}}, "", corev1.URISchemeHTTP)
	d.addPod("prod", "web-0", "node-a", "app=web")
	d.addPod("prod", "web-1", "node-a", "app=web")
	d.addPod("prod", "db-0", "node-a", "app=db")
	c := newClient(t, d, nil, nil)
	for _, tc := range []struct {
		selector string
		want     []string
	}{
		// The session's pod decides before the process's.
		{"app=web", []string{"on-session", "on-process"}},
		{"app=db", []string{"other-pod"}},
		{"app=nope", nil},
	} {
		sel, err := c.SelectPods(t.Context(), "prod", tc.selector)
		if err != nil {
			t.Fatal(err)
		}
		ans, err := c.AlertsIn(t.Context(), sel, nil, 10)
		if err != nil {
			t.Fatal(err)
		}
		if got := ids(ans.Items, func(a Alert) string { return a.ID }); !slices.Equal(got, tc.want) {
			t.Errorf("alerts -l %s: got %v, want %v", tc.selector, got, tc.want)
		}
	}
}
