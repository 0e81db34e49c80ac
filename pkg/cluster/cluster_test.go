package cluster

import (
	"errors"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"

	"github.com/execid/correlator/pkg/auditlog"
	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/store"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func sess(id, ns, pod, user string, minute int) join.Session {
	return join.Session{ExecRecord: auditlog.ExecRecord{AuditID: id, Namespace: ns, Pod: pod, Container: "app",
		User: auditlog.UserInfo{Username: user}, Command: []string{"sh"}, RequestReceivedTimestamp: t0.Add(time.Duration(minute) * time.Minute)}}
}

func proc(id string, pid uint32) join.Process {
	p := join.Process{AuditID: id, Flags: []string{}}
	p.PID, p.ProcessID, p.Argv = pid, id+"-"+string(rune('a'+pid)), []string{"cat", "/etc/shadow"}
	return p
}

// cluster3 is three nodes: a and b answer, c's agent cannot be reached,
// and d runs no agent.
func cluster3(t *testing.T) *apiserverDouble {
	d := newAPIServerDouble(t)
	d.nodes = []string{"node-a", "node-b", "node-c", "node-d"}
	shared := sess("shared", "prod", "web-1", "alice", 5)
	d.addAgent("node-a", &nodeStore{pageCap: 2, sessions: []join.Session{
		sess("a1", "prod", "web-0", "alice", 1), sess("a2", "prod", "web-0", "bob", 3), sess("a3", "dev", "api-0", "alice", 7),
		sess("replayed", "prod", "web-0", "mallory", 8), shared,
	}, procs: []join.Process{proc("a1", 1), proc("a1", 2)}, alerts: []store.Alert{{ID: "x1", Time: t0, Rule: "shell"}}}, "", corev1.URISchemeHTTP)
	d.addAgent("node-b", &nodeStore{pageCap: 2, sessions: []join.Session{
		sess("b1", "prod", "web-1", "alice", 2), sess("replayed", "prod", "web-1", "eve", 9), shared,
	}, alerts: []store.Alert{{ID: "x2", Time: t0.Add(time.Minute), Rule: "shell"}}}, "", corev1.URISchemeHTTPS)
	d.addAgent("node-c", nil, "", corev1.URISchemeHTTP)
	d.addPod("prod", "web-0", "node-a", "app=web", "track=stable")
	d.addPod("prod", "web-1", "node-b", "app=web", "track=canary")
	return d
}

func newClient(t *testing.T, d *apiserverDouble, rc *rest.Config, progress func(int, int)) *Client {
	t.Helper()
	if rc == nil {
		rc = &rest.Config{BearerToken: responderToken}
	}
	rc.Host = d.srv.URL
	c, err := New(Config{Rest: rc, Concurrency: 2, NodeTimeout: 5 * time.Second, Progress: progress})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Authenticate(t.Context(), Auth{}); err != nil {
		t.Fatal(err)
	}
	return c
}

func ids[T any](items []T, f func(T) string) []string {
	var out []string
	for _, it := range items {
		out = append(out, f(it))
	}
	return out
}

func unreachable(fs []Failure) []string { return ids(fs, func(f Failure) string { return f.Node }) }

func TestSessions(t *testing.T) {
	d := cluster3(t)
	var calls, last int
	c := newClient(t, d, nil, func(done, total int) { calls++; last = done * 100 / max(total, 1) })
	for _, tc := range []struct {
		name      string
		q         url.Values
		limit     int
		want      []string
		wantNodes map[string][]string
		truncated bool
	}{
		{name: "every node, newest first, one shared session once", q: url.Values{}, limit: 100,
			want:      []string{"replayed", "replayed", "a3", "shared", "a2", "b1", "a1"},
			wantNodes: map[string][]string{"shared": {"node-a", "node-b"}, "b1": {"node-b"}}},
		{name: "limit across nodes", q: url.Values{}, limit: 3, want: []string{"replayed", "replayed", "a3"}, truncated: true},
		{name: "user filter", q: url.Values{"user": {"alice"}}, limit: 100, want: []string{"a3", "shared", "b1", "a1"}},
		{name: "namespace filter", q: url.Values{"namespace": {"dev"}}, limit: 100, want: []string{"a3"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ans, err := c.Sessions(t.Context(), tc.q, tc.limit)
			if err != nil {
				t.Fatal(err)
			}
			if got := ids(ans.Items, func(s Session) string { return s.AuditID }); !slices.Equal(got, tc.want) {
				t.Errorf("sessions %v, want %v", got, tc.want)
			}
			if !ans.Partial || !slices.Equal(unreachable(ans.Unreachable), []string{"node-c", "node-d"}) || ans.Nodes != 4 {
				t.Errorf("partial %v unreachable %+v nodes %d, want node-c and node-d of 4", ans.Partial, ans.Unreachable, ans.Nodes)
			}
			if ans.Truncated != tc.truncated {
				t.Errorf("truncated %v, want %v", ans.Truncated, tc.truncated)
			}
			for _, s := range ans.Items {
				if w, ok := tc.wantNodes[s.AuditID]; ok && !slices.Equal(s.Nodes, w) {
					t.Errorf("%s on %v, want %v", s.AuditID, s.Nodes, w)
				}
			}
		})
	}
	if calls == 0 || last != 100 {
		t.Errorf("progress called %d times, last at %d%%", calls, last)
	}
	if !slices.Contains(d.proxied, "https:correlator-node-b:8080") || !slices.Contains(d.proxied, "correlator-node-a:8080") {
		t.Errorf("proxy names %v: want https: for the TLS agent only", d.proxied)
	}
}

func TestSession(t *testing.T) {
	d := cluster3(t)
	c := newClient(t, d, nil, nil)
	for _, tc := range []struct {
		id    string
		nodes [][]string
	}{
		{"replayed", [][]string{{"node-a"}, {"node-b"}}}, // one ID, two requests: both shown
		{"shared", [][]string{{"node-a", "node-b"}}},     // one store seen twice: once
		{"a1", [][]string{{"node-a"}}},
		{"nowhere", nil},
	} {
		ans, err := c.Session(t.Context(), tc.id)
		if err != nil {
			t.Fatal(err)
		}
		got := ids(ans.Items, func(v SessionView) string { return strings.Join(v.Nodes, ",") })
		want := ids(tc.nodes, func(n []string) string { return strings.Join(n, ",") })
		if !slices.Equal(got, want) {
			t.Errorf("%s: on %v, want %v", tc.id, got, want)
		}
		if !ans.Partial {
			t.Errorf("%s: not partial with node-c down", tc.id)
		}
	}
	ans, _ := c.Session(t.Context(), "a1")
	if len(ans.Items) != 1 || len(ans.Items[0].Tree) != 2 {
		t.Errorf("a1 tree %+v, want two roots", ans.Items)
	}
	if _, err := c.Session(t.Context(), "../x"); err == nil {
		t.Error("an ID with a slash was sent")
	}
}

func TestWho(t *testing.T) {
	d := cluster3(t)
	c := newClient(t, d, nil, nil)
	for _, tc := range []struct {
		name, ns, pod, container string
		procs                    bool
		want                     []string
		node                     string
		partial                  bool
	}{
		{name: "pod on node-a asks node-a only", ns: "prod", pod: "web-0", want: []string{"replayed", "a2", "a1"}, node: "node-a"},
		{name: "with processes", ns: "prod", pod: "web-0", procs: true, want: []string{"replayed", "a2", "a1"}, node: "node-a"},
		{name: "container filter", ns: "prod", pod: "web-0", container: "sidecar", node: "node-a"},
		{name: "gone pod asks every node", ns: "dev", pod: "api-0", want: []string{"a3"}, partial: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d.proxied = nil
			ans, err := c.Who(t.Context(), tc.ns, tc.pod, tc.container, url.Values{}, 100, tc.procs)
			if err != nil {
				t.Fatal(err)
			}
			if got := ids(ans.Items, func(s Session) string { return s.AuditID }); !slices.Equal(got, tc.want) {
				t.Errorf("sessions %v, want %v", got, tc.want)
			}
			if ans.Node != tc.node || ans.Partial != tc.partial {
				t.Errorf("node %q partial %v, want %q %v", ans.Node, ans.Partial, tc.node, tc.partial)
			}
			if tc.node != "" && slices.ContainsFunc(d.proxied, func(p string) bool { return !strings.Contains(p, tc.node) }) {
				t.Errorf("asked %v, want only %s", d.proxied, tc.node)
			}
			for _, s := range ans.Items {
				if n := len(s.Processes); (tc.procs && s.AuditID == "a1") != (n == 2) {
					t.Errorf("%s has %d processes (asked %v)", s.AuditID, n, tc.procs)
				}
			}
		})
	}
	ans, err := c.Who(t.Context(), "prod", "on-c", "", nil, 10, false)
	if err != nil || ans.Node != "" {
		t.Fatalf("gone pod: %+v %v", ans, err)
	}
	d.addPod("prod", "on-c", "node-c")
	ans, err = c.Who(t.Context(), "prod", "on-c", "", nil, 10, false)
	if err != nil || !ans.Partial || len(ans.Unreachable) != 1 || ans.Unreachable[0].Node != "node-c" {
		t.Errorf("pod on an unreachable node: %+v %v", ans, err)
	}
}

func TestAlerts(t *testing.T) {
	c := newClient(t, cluster3(t), nil, nil)
	ans, err := c.Alerts(t.Context(), url.Values{"since": {"24h"}}, 10)
	if err != nil {
		t.Fatal(err)
	}
	if got := ids(ans.Items, func(a Alert) string { return a.ID + "@" + a.Nodes[0] }); !slices.Equal(got, []string{"x2@node-b", "x1@node-a"}) {
		t.Errorf("alerts %v", got)
	}
}

func TestAgentsDiscovery(t *testing.T) {
	d := cluster3(t)
	d.addAgent("node-e", &nodeStore{pageCap: 1}, corev1.PodPending, corev1.URISchemeHTTP)
	d.nodesForbidden = true // nodes without an agent then go unreported
	c := newClient(t, d, nil, nil)
	agents, fails, err := c.Agents(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if got := ids(agents, func(a Agent) string { return a.Node }); !slices.Equal(got, []string{"node-a", "node-b", "node-c"}) {
		t.Errorf("agents on %v", got)
	}
	if len(fails) != 1 || fails[0].Node != "node-e" || !strings.Contains(fails[0].Error, "Pending") {
		t.Errorf("failures %+v, want node-e pending", fails)
	}
	if _, err := c.AgentOn(t.Context(), "node-x"); !errors.Is(err, ErrNoAgent) {
		t.Errorf("agent on a node without one: %v", err)
	}
}

func TestAuthenticate(t *testing.T) {
	d := cluster3(t)
	// A kubeconfig with a client certificate only: the double accepts
	// the responder through a wrapper standing in for the certificate.
	certOnly := func() *rest.Config {
		return &rest.Config{WrapTransport: headerWrapper("Authorization", "Bearer "+responderToken)}
	}
	for _, tc := range []struct {
		name     string
		rc       *rest.Config
		mode     AuthMode
		source   string
		minted   bool
		wantErr  bool
		agentsOK bool
	}{
		{name: "bearer token", rc: &rest.Config{BearerToken: responderToken}, source: "kubeconfig bearer token", agentsOK: true},
		{name: "client certificate: minted", rc: certOnly(), source: "token minted for serviceaccount correlator/correlator-reader", minted: true, agentsOK: true},
		{name: "impersonating: minted", rc: &rest.Config{BearerToken: responderToken, Impersonate: rest.ImpersonationConfig{UserName: "alice"}},
			source: "impersonating", minted: true},
		{name: "kubeconfig mode without a token", rc: certOnly(), mode: AuthKubeconfig, wantErr: true},
		{name: "serviceaccount mode", rc: &rest.Config{BearerToken: responderToken}, mode: AuthServiceAccount, source: "asked for", minted: true, agentsOK: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d.minted = nil
			tc.rc.Host = d.srv.URL
			c, err := New(Config{Rest: tc.rc})
			if err != nil {
				t.Fatal(err)
			}
			src, err := c.Authenticate(t.Context(), Auth{Mode: tc.mode})
			if (err != nil) != tc.wantErr {
				t.Fatalf("err %v, want error %v", err, tc.wantErr)
			}
			if err != nil {
				return
			}
			if !strings.Contains(src, tc.source) || strings.Contains(src, responderToken) || strings.Contains(src, mintedToken) {
				t.Errorf("source %q, want it to say %q and no token", src, tc.source)
			}
			if tc.minted != (len(d.minted) == 1) {
				t.Fatalf("minted %d tokens", len(d.minted))
			}
			if tc.minted && (!slices.Equal(d.minted[0].Spec.Audiences, []string{"correlator"}) || *d.minted[0].Spec.ExpirationSeconds < 600) {
				t.Errorf("token request %+v", d.minted[0].Spec)
			}
			if !tc.agentsOK {
				return
			}
			ans, err := c.Sessions(t.Context(), nil, 10)
			if err != nil || len(ans.Unreachable) != 2 || len(ans.Items) == 0 {
				t.Errorf("sessions with %s: %d items, unreachable %+v, %v", tc.name, len(ans.Items), ans.Unreachable, err)
			}
		})
	}
	// A wrong token: the agents refuse, and say so per node.
	c := newClient(t, d, nil, nil)
	c.token = "stolen"
	ans, err := c.Sessions(t.Context(), nil, 10)
	if err != nil || len(ans.Items) != 0 || !strings.Contains(ans.Unreachable[0].Error, "401") {
		t.Errorf("wrong token: %+v %v", ans, err)
	}
}
