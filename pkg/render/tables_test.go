package render

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"github.com/execid/correlator/pkg/api"
	"github.com/execid/correlator/pkg/auditlog"
	"github.com/execid/correlator/pkg/capture"
	"github.com/execid/correlator/pkg/cluster"
	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/vocab"
)

// TestRenderTables: the list tables name the effective user, fall back to
// the exec time for a process whose fork was not seen, and mark argv the
// kernel cut.
func TestRenderTables(t *testing.T) {
	var b strings.Builder
	err := New(&b, Table).SessionPage(api.SessionPage{Items: []join.Session{
		{ExecRecord: auditlog.ExecRecord{AuditID: "a", User: auditlog.UserInfo{Username: "alice"}, Namespace: "shop", Pod: "web-0",
			RequestReceivedTimestamp: t0(), Code: 101, Command: []string{"sh"}}, ProcessCount: 2},
		{ExecRecord: auditlog.ExecRecord{AuditID: "b", User: auditlog.UserInfo{Username: "bob"},
			ImpersonatedUser: &auditlog.UserInfo{Username: "deployer"}, Namespace: "shop", Pod: "web-0",
			Flags: []string{vocab.FlagAuditIDConflict}}},
	}, NextCursor: "c1"})
	want := []string{"AUDIT-ID USER NAMESPACE/POD CONTAINER STARTED PROCS CODE FLAGS COMMAND",
		"a alice shop/web-0 - 2026-03-04T10:00:00Z 2 101 - sh",
		"b deployer (as, by bob) shop/web-0 - - 0 0 audit_id_conflict",
		"(more: --all, or the cursor c1)"}
	if got := rows(&b); err != nil || !slices.Equal(got, want) {
		t.Errorf("sessions table (%v):\n%s\nwant\n%s", err, strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	b.Reset()
	err = New(&b, Table).ProcessPage(api.ProcessPage{Items: []join.Process{
		{Exec: capture.Exec{PID: 7, Argv: []string{"tar", "c"}, ArgvTruncated: true}, ExecTime: t0(),
			Attribution: vocab.AttributionHeuristic, Flags: []string{vocab.FlagArgvTruncated}},
	}})
	want = []string{"STARTED PID NAMESPACE/POD AUDIT-ID ATTRIBUTION FLAGS ARGV",
		"2026-03-04T10:00:00Z 7 -/- - heuristic argv_truncated tar c …"}
	if got := rows(&b); err != nil || !slices.Equal(got, want) {
		t.Errorf("processes table (%v):\n%s\nwant\n%s", err, strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestRenderWhoIn(t *testing.T) {
	a := cluster.WhoInAnswer{Selection: cluster.Selection{Selector: "app=web", Namespace: "shop",
		Pods: []cluster.PodRef{{Namespace: "shop", Name: "web-0", Node: "node-a"}, {Namespace: "shop", Name: "web-9"}}}}
	a.Items = []cluster.Session{{Nodes: []string{"node-a"}, Session: join.Session{ExecRecord: auditlog.ExecRecord{
		AuditID: "id-1", Namespace: "shop", Pod: "web-0", Container: "app", Code: 101,
		User: auditlog.UserInfo{Username: "alice"}, Command: []string{"sh"}}}}}
	var b bytes.Buffer
	if err := New(&b, Table).WhoIn(a); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"Pods in namespace shop matching app=web: 2", "NAMESPACE/POD", "shop/web-0", "node-a", "alice", "id-1"} {
		if !strings.Contains(b.String(), s) {
			t.Errorf("want %q in:\n%s", s, b.String())
		}
	}
	b.Reset()
	a.Items = nil
	if err := New(&b, Table).WhoIn(a); err != nil || !strings.Contains(b.String(), "No exec sessions recorded.") {
		t.Errorf("no sessions: %v\n%s", err, b.String())
	}
}
