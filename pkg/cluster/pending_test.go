package cluster_test

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/execid/correlator/pkg/api"
	"github.com/execid/correlator/pkg/auditlog"
	"github.com/execid/correlator/pkg/capture"
	"github.com/execid/correlator/pkg/cluster"
	"github.com/execid/correlator/pkg/cluster/clustertest"
	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/render"
	"github.com/execid/correlator/pkg/store"
	"github.com/execid/correlator/pkg/store/sqlite"
	"github.com/execid/correlator/pkg/vocab"
)

// TestPluginServesPending: the plugin's session view, asked of an agent
// through the stand-in kube-apiserver or read from a store directly (the
// --elasticsearch path, here over SQLite), serves a claimant whose wait
// is to end as pending, with its deadline, and one whose stored deadline
// has passed as not; printed, the pending one says what it waits for and
// the answer ends with when to ask again. Control: read after the
// deadline, neither is pending and nothing says to ask again.
func TestPluginServesPending(t *testing.T) {
	ctx := context.Background()
	now := time.Now().UTC()
	until := now.Add(time.Hour).Truncate(time.Second)
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "node.db"), sqlite.Config{}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	claim := func(id string, until time.Time) join.Process {
		return join.Process{Exec: capture.Exec{ProcessID: id, PID: 7, Filename: "/bin/sh", Argv: []string{"sh"}},
			Namespace: "prod", Pod: "web-0", Container: "app", Start: now.Add(-time.Minute), ClaimedAuditID: "s1",
			Flags: []string{}, PendingUntil: until}
	}
	if err := st.Write(ctx, store.Batch{
		Sessions: []join.Session{{ExecRecord: auditlog.ExecRecord{AuditID: "s1", Namespace: "prod", Pod: "web-0",
			Container: "app", User: auditlog.UserInfo{Username: "alice"}, Command: []string{"sh"}, Verb: "create",
			Subresource: "exec", RequestReceivedTimestamp: now.Add(-2 * time.Minute)}}},
		Processes: []join.Process{claim("waits", until), claim("waited", now.Add(-time.Hour)),
			{Exec: capture.Exec{ProcessID: "root", PID: 6, Argv: []string{"sh"}}, Namespace: "prod", Pod: "web-0",
				Start: now.Add(-90 * time.Second), AuditID: "s1", Attribution: vocab.AttributionAuditID}},
	}); err != nil {
		t.Fatal(err)
	}
	f := clustertest.Start(t, clustertest.Options{Nodes: 1, Reader: func(string) api.Reader { return st }})
	fan := fleetClient(t, f, cluster.Config{NodeTimeout: time.Minute})
	check := func(what string, a cluster.Answer[cluster.SessionView], pending bool) {
		t.Helper()
		if len(a.Items) != 1 || len(a.Items[0].Claimants) != 2 {
			t.Fatalf("%s: %+v", what, a.Items)
		}
		for _, c := range a.Items[0].Claimants {
			want := pending && c.ProcessID == "waits"
			if c.Pending != want || (want && !c.PendingUntil.Equal(until)) || (!want && !c.PendingUntil.IsZero()) {
				t.Errorf("%s: %s served pending %v until %v, want pending %v", what, c.ProcessID, c.Pending, c.PendingUntil, want)
			}
		}
		var b bytes.Buffer
		if err := render.New(&b, render.Table).SessionViews(a); err != nil {
			t.Fatal(err)
		}
		deadline := until.Format(time.RFC3339)
		for _, s := range []string{"(pending: waiting for its audit record until " + deadline + ")",
			"its attribution may change until " + deadline + "; ask again after then"} {
			if strings.Contains(b.String(), s) != pending {
				t.Errorf("%s: %q printed %v, want %v:\n%s", what, s, !pending, pending, b.String())
			}
		}
	}
	a, err := fan.Session(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	check("through the agent", a, true)
	for _, tc := range []struct {
		name    string
		at      time.Time
		pending bool
	}{{"from the store", now, true}, {"from the store after the deadline", until, false}} {
		a, err := cluster.NewESSource(st, func() time.Time { return tc.at }).Session(ctx, "s1")
		if err != nil {
			t.Fatal(err)
		}
		check(tc.name, a, tc.pending)
		// who, from the store: the pod's pending processes.
		w, err := cluster.NewESSource(st, func() time.Time { return tc.at }).Who(ctx, "prod", "web-0", "", nil, 0, false)
		if err != nil {
			t.Fatal(err)
		}
		if got := len(w.Pending); got != map[bool]int{true: 1, false: 0}[tc.pending] ||
			tc.pending && (w.Pending[0].ProcessID != "waits" || !w.Pending[0].PendingUntil.Equal(until)) {
			t.Errorf("%s: who's pending %+v, want waits only: %v", tc.name, w.Pending, tc.pending)
		}
	}
}
