package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/execid/correlator/internal/escluster"
	"github.com/execid/correlator/pkg/api"
	"github.com/execid/correlator/pkg/auditlog"
	"github.com/execid/correlator/pkg/capture"
	"github.com/execid/correlator/pkg/cluster"
	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/store"
	"github.com/execid/correlator/pkg/store/elasticsearch"
	"github.com/execid/correlator/pkg/vocab"
)

// esKubeconfig is a kubeconfig whose context's namespace is prod; with
// --elasticsearch nothing is asked of its server.
const esKubeconfig = `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {}}]
contexts: [{name: c, context: {cluster: c, user: u, namespace: prod}}]
current-context: c
`

// TestKubectlElasticsearch runs the plugin's --elasticsearch path against
// a store on the real cluster, under an index prefix of its own: the
// sessions (all, by user, by --since), who exec'd into a pod with each
// session's processes, and a session's process tree.
func TestKubectlElasticsearch(t *testing.T) {
	cl := escluster.Shared(t)
	prefix := escluster.Prefix(t, cl)
	st, err := elasticsearch.Open(t.Context(), elasticsearch.Config{URLs: cl.URLs(), APIKey: os.Getenv(escluster.EnvAPIKey),
		IndexPrefix: prefix, Refresh: "wait_for"}, zerolog.Nop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Second)
	sess := func(id, ns, pod, user string, ago time.Duration) join.Session {
		return join.Session{ExecRecord: auditlog.ExecRecord{AuditID: id, Namespace: ns, Pod: pod, Container: "app",
			User: auditlog.UserInfo{Username: user}, Command: []string{"sh"}, Verb: "create", Subresource: "exec",
			RequestReceivedTimestamp: now.Add(-ago),
			Stages:                   []string{"RequestReceived", "ResponseStarted", "ResponseComplete"}}}
	}
	proc := func(id, parent, auditID string, pid uint32, ago time.Duration, argv ...string) join.Process {
		return join.Process{Exec: capture.Exec{ProcessID: id, ParentProcessID: parent, PID: pid, Filename: "/bin/" + argv[0], Argv: argv},
			Namespace: "prod", Pod: "web-0", Container: "app", Start: now.Add(-ago), AuditID: auditID,
			Attribution: vocab.AttributionAuditID, Confidence: 1, Source: vocab.SourceEnv}
	}
	if err := st.Write(t.Context(), store.Batch{
		Sessions: []join.Session{sess("s-alice", "prod", "web-0", "alice", 3*time.Hour), sess("s-bob", "prod", "web-0", "bob", 20*time.Minute),
			sess("s-dev", "dev", "api-0", "alice", 10*time.Minute)},
		Processes: []join.Process{proc("p1", "", "s-alice", 10, 3*time.Hour-time.Second, "sh"),
			proc("p2", "p1", "s-alice", 11, 3*time.Hour-2*time.Second, "cat", "/etc/shadow"),
			proc("p3", "p1", "s-alice", 12, 3*time.Hour-3*time.Second, "id"),
			proc("p4", "", "s-bob", 20, 20*time.Minute-time.Second, "ls")},
	}); err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(esKubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(out any, args ...string) {
		t.Helper()
		cmd := newKubectlCmd(true)
		var stdout, stderr bytes.Buffer
		cmd.SetOut(&stdout)
		cmd.SetErr(&stderr)
		cmd.SetArgs(append(append(args, "-o", "json", "--elasticsearch", cl.URL(), "--es-index-prefix", prefix,
			"--kubeconfig", kubeconfig), esAPIKeyFlag(t)...))
		if err := cmd.Execute(); err != nil {
			t.Fatalf("kubectl correlator %v: %v\n%s", args, err, stderr.String())
		}
		if err := json.Unmarshal(stdout.Bytes(), out); err != nil {
			t.Fatalf("kubectl correlator %v: decoding %q: %v", args, stdout.String(), err)
		}
	}
	ids := func(items []cluster.Session) []string {
		var out []string
		for _, s := range items {
			if s.Nodes == nil || len(s.Nodes) != 0 {
				t.Errorf("session %s names nodes %v, want [] (the store keeps none)", s.AuditID, s.Nodes)
			}
			out = append(out, s.AuditID)
		}
		return out
	}

	var all cluster.Answer[cluster.Session]
	run(&all, "sessions", "-A")
	if got := ids(all.Items); !slices.Equal(got, []string{"s-dev", "s-bob", "s-alice"}) || all.Partial || all.Truncated {
		t.Errorf("sessions -A = %v (partial %v, truncated %v), want newest first", got, all.Partial, all.Truncated)
	}
	var prod cluster.Answer[cluster.Session]
	run(&prod, "sessions") // the context's namespace
	if got := ids(prod.Items); !slices.Equal(got, []string{"s-bob", "s-alice"}) {
		t.Errorf("sessions in prod = %v", got)
	}
	var alice cluster.Answer[cluster.Session]
	run(&alice, "sessions", "-A", "--user", "alice")
	if got := ids(alice.Items); !slices.Equal(got, []string{"s-dev", "s-alice"}) {
		t.Errorf("sessions --user alice = %v", got)
	}
	var recent cluster.Answer[cluster.Session]
	run(&recent, "sessions", "-A", "--since", "1h", "--limit", "1")
	if got := ids(recent.Items); !slices.Equal(got, []string{"s-dev"}) || !recent.Truncated {
		t.Errorf("sessions --since 1h --limit 1 = %v (truncated %v), want s-dev, truncated", got, recent.Truncated)
	}

	var who cluster.WhoAnswer
	run(&who, "who", "web-0", "-n", "prod")
	if who.Namespace != "prod" || who.Pod != "web-0" || len(who.Items) != 2 {
		t.Fatalf("who web-0 = %+v", who)
	}
	procs := map[string][]string{}
	for _, s := range who.Items {
		for _, p := range s.Processes {
			procs[s.AuditID] = append(procs[s.AuditID], p.ProcessID)
		}
	}
	for id, want := range map[string][]string{"s-alice": {"p1", "p2", "p3"}, "s-bob": {"p4"}} {
		got := slices.Sorted(slices.Values(procs[id]))
		if !slices.Equal(got, want) {
			t.Errorf("who web-0: processes of %s = %v, want %v", id, got, want)
		}
	}

	var one cluster.Answer[cluster.SessionView]
	run(&one, "session", "s-alice")
	if len(one.Items) != 1 {
		t.Fatalf("session s-alice = %+v", one)
	}
	v := one.Items[0]
	if v.AuditID != "s-alice" || v.User.Username != "alice" || v.ProcessCount != 3 || len(v.Processes) != 3 {
		t.Errorf("session s-alice: %s by %s, %d processes counted, %d listed", v.AuditID, v.User.Username, v.ProcessCount, len(v.Processes))
	}
	if len(v.Tree) != 1 || v.Tree[0].ProcessID != "p1" || !slices.Equal(treeIDs(v.Tree[0].Children), []string{"p2", "p3"}) {
		t.Errorf("session s-alice tree = %s, want p1 over p2 and p3", treeString(v.Tree))
	}
	var none cluster.Answer[cluster.SessionView]
	run(&none, "session", "nowhere")
	if len(none.Items) != 0 {
		t.Errorf("session nowhere = %+v", none)
	}
}

func treeIDs(ns []*api.TreeNode) []string {
	var out []string
	for _, n := range ns {
		out = append(out, n.ProcessID)
	}
	slices.Sort(out)
	return out
}

func treeString(ns []*api.TreeNode) string {
	b, _ := json.Marshal(ns)
	return string(b)
}
