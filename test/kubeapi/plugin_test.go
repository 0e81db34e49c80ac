// Package kubeapi tries `kubectl correlator` against a real kube-apiserver:
// the plugin binary finds the agents and asks them through the apiserver's
// pod proxy, with the responder's own credentials and real RBAC, and the
// agents check the forwarded token with TokenReview and
// SubjectAccessReview. It is its own module: it compiles kube-apiserver.
package kubeapi

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/execid/correlator/pkg/cluster"
)

func TestKubectlPluginThroughKubeAPIServer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd and kube-apiserver")
	}
	bin := buildPlugin(t)
	c := startCluster(t)
	as := func(u apiUser) plugin {
		return plugin{bin: bin, kubeconfig: kubeconfig(t, c.api, u.name, u.token, "default")}
	}
	resp := as(responder)

	t.Run("who asks only the pod's node", func(t *testing.T) {
		a, b := c.agentA.seen.count(), c.agentB.seen.count()
		r := resp.must(t, "who", "web-0", "-n", "shop")
		saveOutput(t, "who.txt", r)
		wantIn(t, r.stdout, "Pod shop/web-0 on node node-a", aliceWeb0, replayed)
		wantOut(t, r.stdout, staleWeb0, aliceWeb1)
		if got := c.agentB.seen.count() - b; got != 0 {
			t.Errorf("node-b's agent was asked %d times; who web-0 asks only node-a", got)
		}
		// The agent read the responder's token from X-Correlator-Authorization:
		// the apiserver had removed Authorization.
		for _, call := range c.agentA.seen.since(a) {
			if call.err != nil || call.user != responder.name || call.authorization {
				t.Errorf("node-a authenticated %+v; want user %s, no error, no Authorization header", call, responder.name)
			}
		}
		// -o wide adds each session's processes.
		r = resp.must(t, "who", "web-0", "-n", "shop", "-o", "wide")
		wantIn(t, r.stdout, "cat /etc/shadow")
		// Control: node-b does hold a web-0 session, and sessions finds it.
		got := decode[cluster.Session](t, resp.must(t, "sessions", "--pod", "web-0", "-A", "-o", "json"))
		if i := slices.IndexFunc(got.Items, func(s cluster.Session) bool { return s.AuditID == staleWeb0 }); i < 0 ||
			!slices.Equal(got.Items[i].Nodes, []string{"node-b"}) {
			t.Errorf("sessions --pod web-0 -A: want %s from node-b, got %+v", staleWeb0, got.Items)
		}
	})

	t.Run("sessions merges every node, newest first", func(t *testing.T) {
		r := resp.must(t, "sessions", "--user", "alice", "-A", "-o", "json")
		got := decode[cluster.Session](t, r)
		type row struct{ id, node string }
		var rows []row
		for _, s := range got.Items {
			rows = append(rows, row{s.AuditID, strings.Join(s.Nodes, ",")})
		}
		want := []row{{staleWeb0, "node-b"}, {aliceWeb1, "node-b"}, {replayed, "node-b"}, {replayed, "node-a"}, {aliceWeb0, "node-a"}}
		if !slices.Equal(rows, want) || got.Partial || got.Nodes != 2 || len(got.Unreachable) != 0 {
			t.Errorf("sessions --user alice -A: got %+v (partial %v, nodes %d, unreachable %v), want %+v",
				rows, got.Partial, got.Nodes, got.Unreachable, want)
		}
		saveOutput(t, "sessions.txt", resp.must(t, "sessions", "--user", "alice", "-A"))
		// Control for the user filter: bob's session is there without it.
		r = resp.must(t, "sessions", "-A")
		wantIn(t, r.stdout, bobWeb1)
	})

	t.Run("session shows every node that holds the ID", func(t *testing.T) {
		r := resp.must(t, "session", replayed)
		wantIn(t, r.stdout, "held by 2 different requests", "Node:        node-a", "Node:        node-b", "curl -s http://203.0.113.50/x")
		// Control: a session on one node names that node alone.
		r = resp.must(t, "session", aliceWeb0)
		wantIn(t, r.stdout, "Node:        node-a", "cat /etc/shadow")
		wantOut(t, r.stdout, "node-b", "held by")
		// An ID no node holds is an error.
		r = resp.run(t, "session", "00000000-0000-4000-8000-000000000000")
		if r.code != 1 || !strings.Contains(r.stderr, "not on any of 2 nodes") {
			t.Errorf("an unknown session: want exit 1 naming 2 nodes\n%s", r)
		}
	})

	t.Run("alerts from every node", func(t *testing.T) {
		got := decode[cluster.Alert](t, resp.must(t, "alerts", "-o", "json"))
		var ids []string
		for _, a := range got.Items {
			ids = append(ids, a.ID+"@"+strings.Join(a.Nodes, ","))
		}
		if want := []string{"b-replay@node-b", "a-shadow@node-a"}; !slices.Equal(ids, want) || got.Partial {
			t.Errorf("alerts: got %v (partial %v), want %v", ids, got.Partial, want)
		}
		r := resp.must(t, "alerts", "--severity", "critical")
		wantIn(t, r.stdout, "audit-id-replay")
		wantOut(t, r.stdout, "sensitive-file-read")
	})

	t.Run("RBAC refuses who may not read", func(t *testing.T) {
		a, b := c.agentA.seen.count(), c.agentB.seen.count()
		// No binding: the apiserver refuses the agent pods' list.
		r := as(outsider).run(t, "sessions", "-A")
		if r.code != 1 || !strings.Contains(r.stderr, `User "outsider" cannot list resource "pods"`) || r.stdout != "" {
			t.Errorf("outsider: want exit 1, the apiserver's refusal, no output\n%s", r)
		}
		// The pod list but not the namespace Role: the pod proxy refuses
		// on every node, so there is no answer at all.
		r = as(lister).run(t, "sessions", "-A")
		if r.code != 1 || !strings.Contains(r.stderr, "no answer: 2 of 2 nodes did not answer") ||
			strings.Count(r.stderr, `User "lister" cannot get resource "pods/proxy"`) != 2 {
			t.Errorf("lister: want exit 1 and the pods/proxy refusal on both nodes\n%s", r)
		}
		wantOut(t, r.stdout, aliceWeb0)
		if da, db := c.agentA.seen.count()-a, c.agentB.seen.count()-b; da+db != 0 {
			t.Errorf("the agents were reached %d+%d times; the apiserver should have stopped these users", da, db)
		}
		// A service account token is the responder's to mint for the
		// reader account only, not for the agent's own.
		r = resp.run(t, "sessions", "-A", "--auth", "serviceaccount", "--reader-service-account", "correlator")
		if r.code != 1 || !strings.Contains(r.stderr, `cannot create resource "serviceaccounts/token"`) {
			t.Errorf("minting for correlator/correlator: want the apiserver's refusal\n%s", r)
		}
		r = as(outsider).run(t, "sessions", "-A", "--auth", "serviceaccount")
		if r.code != 1 || !strings.Contains(r.stderr, `cannot create resource "serviceaccounts/token"`) {
			t.Errorf("outsider minting: want the apiserver's refusal\n%s", r)
		}
	})

	t.Run("the agents refuse a caller without the reader role", func(t *testing.T) {
		// proxier passes the apiserver (pod list, pods/proxy) but holds
		// no correlator-reader: the agents' own SubjectAccessReview of
		// the forwarded token must refuse it.
		r := as(proxier).run(t, "sessions", "-A")
		if r.code != 1 || strings.Count(r.stderr, "agent answered 403 Forbidden: not allowed to read correlator sessions") != 2 {
			t.Errorf("proxier: want both agents' 403 and exit 1\n%s\nwhy the agents allowed it: %s", r,
				accessReason(t, c.api, proxier.name, []string{"system:authenticated"}))
		}
		wantOut(t, r.stdout, aliceWeb0)
	})

	t.Run("a minted service account token", func(t *testing.T) {
		a := c.agentA.seen.count()
		r := resp.must(t, "-v", "sessions", "--user", "alice", "-A", "--auth", "serviceaccount")
		wantIn(t, r.stderr, "token minted for serviceaccount correlator/correlator-reader (audience correlator")
		wantIn(t, r.stdout, aliceWeb0, aliceWeb1)
		calls := c.agentA.seen.since(a)
		if len(calls) == 0 {
			t.Fatal("node-a's agent was not asked")
		}
		for _, call := range calls {
			if call.err != nil || call.user != "system:serviceaccount:correlator:correlator-reader" {
				t.Errorf("node-a authenticated %+v; want the reader service account", call)
			}
		}
	})

	t.Run("sessions -l keeps the sessions into the selected pods", func(t *testing.T) {
		rows := func(args ...string) []string {
			t.Helper()
			got := decode[cluster.Session](t, resp.must(t, append([]string{"sessions", "-o", "json"}, args...)...))
			var out []string
			for _, s := range got.Items {
				out = append(out, s.Namespace+"/"+s.Pod+" "+s.AuditID+"@"+strings.Join(s.Nodes, ","))
			}
			slices.Sort(out)
			return out
		}
		shop := []string{
			"shop/web-0 " + aliceWeb0 + "@node-a", "shop/web-0 " + replayed + "@node-a", "shop/web-0 " + staleWeb0 + "@node-b",
			"shop/web-1 " + aliceWeb1 + "@node-b", "shop/web-1 " + bobWeb1 + "@node-b", "shop/web-1 " + replayed + "@node-b",
		}
		all := slices.Sorted(slices.Values(append([]string{"blog/web-2 " + carolBlog + "@node-a"}, shop...)))
		slices.Sort(shop)
		// -A: the app=web pods of both namespaces, not shop/db-0 (app=db).
		if got := rows("-l", "app=web", "-A"); !slices.Equal(got, all) {
			t.Errorf("sessions -l app=web -A:\n got %q\nwant %q", got, all)
		}
		// -n shop: blog/web-2 is left out.
		if got := rows("-l", "app=web", "-n", "shop"); !slices.Equal(got, shop) {
			t.Errorf("sessions -l app=web -n shop:\n got %q\nwant %q", got, shop)
		}
		// Set-based syntax, as kube-apiserver reads it: != also matches
		// blog/web-2, which has no track label.
		if got, want := rows("-l", "app in (web),track!=canary", "-A"), all[:4]; !slices.Equal(got, want) {
			t.Errorf("sessions -l 'app in (web),track!=canary' -A:\n got %q\nwant %q", got, want)
		}
		// Controls: db-0's session exists and app=db finds it; a selector
		// no pod matches finds nothing.
		if got, want := rows("-l", "app=db", "-A"), []string{"shop/db-0 " + carolDB + "@node-b"}; !slices.Equal(got, want) {
			t.Errorf("sessions -l app=db -A: got %q, want %q", got, want)
		}
		r := resp.must(t, "sessions", "-l", "app=nope", "-A", "-o", "json")
		if got := decode[cluster.Session](t, r); len(got.Items) != 0 || !strings.Contains(r.stderr, `no pods in any namespace match "app=nope"`) {
			t.Errorf("sessions -l app=nope -A: want no sessions and a note\n%s", r)
		}
		// who -l asks only the selected pods' nodes.
		b := c.agentB.seen.count()
		r = resp.must(t, "who", "-l", "app=web", "-n", "blog")
		wantIn(t, r.stdout, "Pods in namespace blog matching app=web: 1", carolBlog)
		wantOut(t, r.stdout, aliceWeb0, aliceWeb1)
		if got := c.agentB.seen.count() - b; got != 0 {
			t.Errorf("node-b's agent was asked %d times; blog/web-2 runs on node-a", got)
		}
		if r := resp.run(t, "who", "web-0", "-l", "app=web", "-n", "shop"); r.code != 1 || !strings.Contains(r.stderr, "not both") {
			t.Errorf("who POD -l: want exit 1, not both\n%s", r)
		}
	})

	t.Run("a node down makes a partial answer", func(t *testing.T) {
		c.agentB.stop()
		r := resp.run(t, "sessions", "--user", "alice", "-A")
		if r.code != 3 || !strings.Contains(r.stderr, "partial answer: 1 of 2 nodes did not answer") ||
			!strings.Contains(r.stderr, "  node-b: ") {
			t.Errorf("node-b down: want exit 3 naming node-b\n%s", r)
		}
		wantIn(t, r.stdout, aliceWeb0)
		wantOut(t, r.stdout, aliceWeb1)
		got := decode[cluster.Session](t, resp.run(t, "sessions", "--user", "alice", "-A", "-o", "json"))
		if !got.Partial || len(got.Unreachable) != 1 || got.Unreachable[0].Node != "node-b" || got.Nodes != 2 ||
			len(got.Items) != 2 {
			t.Errorf("node-b down, -o json: got %+v", got)
		}
		// who asks one node: with it down there is no answer; with the
		// other one up, who answers in full.
		r = resp.run(t, "who", "web-1", "-n", "shop")
		if r.code != 1 || !strings.Contains(r.stderr, "no answer: 1 of 1 nodes did not answer") {
			t.Errorf("who web-1 with node-b down: want exit 1\n%s", r)
		}
		r = resp.must(t, "who", "web-0", "-n", "shop")
		wantIn(t, r.stdout, aliceWeb0)
	})
}

// decode reads a -o json answer.
func decode[T any](t *testing.T, r result) cluster.Answer[T] {
	t.Helper()
	var a cluster.Answer[T]
	if err := json.Unmarshal([]byte(r.stdout), &a); err != nil {
		t.Fatalf("decoding the JSON answer: %v\n%s", err, r)
	}
	return a
}

func wantIn(t *testing.T, text string, subs ...string) {
	t.Helper()
	for _, s := range subs {
		if !strings.Contains(text, s) {
			t.Errorf("want %q in:\n%s", s, text)
		}
	}
}

func wantOut(t *testing.T, text string, subs ...string) {
	t.Helper()
	for _, s := range subs {
		if strings.Contains(text, s) {
			t.Errorf("want no %q in:\n%s", s, text)
		}
	}
}
