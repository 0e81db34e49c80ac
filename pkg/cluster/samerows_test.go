package cluster_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/execid/correlator/internal/escluster"
	"github.com/execid/correlator/pkg/api"
	"github.com/execid/correlator/pkg/auditlog"
	"github.com/execid/correlator/pkg/capture"
	"github.com/execid/correlator/pkg/cluster"
	"github.com/execid/correlator/pkg/cluster/clustertest"
	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/store"
	"github.com/execid/correlator/pkg/store/elasticsearch"
	"github.com/execid/correlator/pkg/store/sqlite"
	"github.com/execid/correlator/pkg/vocab"
)

// nodeData is node i's sessions (two users, two namespaces) and their
// processes, a root and a child each.
func nodeData(node string, i int) store.Batch {
	var b store.Batch
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC).Add(time.Duration(i) * time.Second)
	for j, user := range []string{"alice", "bob", "alice"} {
		id := fmt.Sprintf("%s-s%d", node, j)
		at := t0.Add(time.Duration(j) * time.Minute)
		ns := []string{"prod", "dev"}[j%2]
		b.Sessions = append(b.Sessions, join.Session{ExecRecord: auditlog.ExecRecord{AuditID: id, Namespace: ns,
			Pod: "web-" + node, Container: "app", User: auditlog.UserInfo{Username: user, Groups: []string{"sre"}},
			Command: []string{"sh"}, Verb: "create", Subresource: "exec", Stages: []string{"ResponseComplete"},
			RequestReceivedTimestamp: at, EndTimestamp: at.Add(30 * time.Second)}, UpdatedAt: at})
		root := join.Process{Exec: capture.Exec{ProcessID: id + "-p0", PID: 10, Filename: "/bin/sh", Argv: []string{"sh"},
			SessionRootID: id + "-p0"}, Namespace: ns, Pod: "web-" + node, Container: "app", Start: at.Add(time.Second),
			AuditID: id, Attribution: vocab.AttributionAuditID, Source: vocab.SourceEnv, Confidence: 1, Flags: []string{}}
		child := root
		child.Exec = capture.Exec{ProcessID: id + "-p1", ParentProcessID: root.ProcessID, PID: 11, PPID: 10,
			Filename: "/bin/cat", Argv: []string{"cat", "/etc/shadow"}, SessionRootID: root.ProcessID}
		child.Start, child.Attribution, child.Source = at.Add(2*time.Second), vocab.AttributionInherited, vocab.SourceInherited
		b.Processes = append(b.Processes, root, child)
	}
	return b
}

// TestFanOutAndElasticsearchSameRows: the same data, held by each node's
// agent (a real SQLite store each, asked through the stand-in
// kube-apiserver's pod proxy) and by the Elasticsearch store they share
// (the real three-node cluster), gives the same rows to the same query:
// every session, by user, by namespace, by time, and a session's tree.
func TestFanOutAndElasticsearchSameRows(t *testing.T) {
	ctx := context.Background()
	cl := escluster.Shared(t)
	es, err := elasticsearch.Open(ctx, elasticsearch.Config{URLs: cl.URLs(), APIKey: os.Getenv(escluster.EnvAPIKey),
		IndexPrefix: escluster.Prefix(t, cl), Refresh: "wait_for"}, zerolog.Nop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	const nodes = 12
	readers := map[string]api.Reader{}
	for i := range nodes {
		node := fmt.Sprintf("node-%04d", i)
		st, err := sqlite.Open(filepath.Join(t.TempDir(), "node.db"), sqlite.Config{}, zerolog.Nop())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		b := nodeData(node, i)
		if err := st.Write(ctx, b); err != nil {
			t.Fatal(err)
		}
		if err := es.Write(ctx, b); err != nil {
			t.Fatal(err)
		}
		readers[node] = st
	}
	f := clustertest.Start(t, clustertest.Options{Nodes: nodes, Reader: func(node string) api.Reader { return readers[node] }})
	fan := fleetClient(t, f, cluster.Config{NodeTimeout: time.Minute})
	esSrc := cluster.NewESSource(es, time.Now)

	rows := func(a cluster.Answer[cluster.Session]) string {
		for i := range a.Items {
			a.Items[i].Nodes = nil // the store keeps no node names
		}
		b, _ := json.Marshal(a.Items)
		return string(b)
	}
	queries := map[string]url.Values{
		"all":       {},
		"user":      {"user": {"alice"}},
		"namespace": {"namespace": {"dev"}},
		"window":    {"since": {"2026-03-01T12:01:00Z"}, "until": {"2026-03-01T12:02:05Z"}},
		"group":     {"group": {"sre"}, "namespace": {"prod"}},
	}
	for name, q := range queries {
		a, err := fan.Sessions(ctx, q, 1000)
		if err != nil || a.Partial {
			t.Fatalf("%s: fan-out: %v (partial %v)", name, err, a.Partial)
		}
		b, err := esSrc.Sessions(ctx, q, 1000)
		if err != nil {
			t.Fatalf("%s: elasticsearch: %v", name, err)
		}
		if len(a.Items) == 0 {
			t.Fatalf("%s: no rows (positive control)", name)
		}
		if ra, rb := rows(a), rows(b); ra != rb {
			t.Errorf("%s: the fan-out and Elasticsearch differ:\nfan-out %s\nes      %s", name, ra, rb)
		}
	}
	for _, id := range []string{"node-0003-s1", "node-0011-s2"} {
		a, err := fan.Session(ctx, id)
		if err != nil || len(a.Items) != 1 {
			t.Fatalf("session %s: fan-out: %+v, %v", id, a.Items, err)
		}
		b, err := esSrc.Session(ctx, id)
		if err != nil || len(b.Items) != 1 {
			t.Fatalf("session %s: elasticsearch: %+v, %v", id, b.Items, err)
		}
		a.Items[0].Nodes, b.Items[0].Nodes = nil, nil
		ja, _ := json.Marshal(a.Items[0])
		jb, _ := json.Marshal(b.Items[0])
		if len(a.Items[0].Processes) != 2 || string(ja) != string(jb) {
			t.Errorf("session %s: the fan-out and Elasticsearch differ:\nfan-out %s\nes      %s", id, ja, jb)
		}
	}
}
