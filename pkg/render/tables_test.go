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

// TestRenderPending: a pending process says it waits, for what and until
// when, wherever a process is written (the process table, a session's
// tree and claimants, who's process lines), and an answer holding one
// ends with when to ask again, after the latest deadline; an answer with
// none pending (one whose deadline the server found passed included)
// says neither.
func TestRenderPending(t *testing.T) {
	ps := pendingProcesses()
	passed := ps[2]
	passed.PendingUntil = t0() // as a client might hold it: the server said not pending
	rootOnly := ps[1:2]
	hint := func(n, until string) string {
		return n + " still pending: " + map[bool]string{true: "its", false: "their"}[n == "1 process"] +
			" attribution may change until " + until + "; ask again after then)"
	}
	asWho := func(p []join.Process) cluster.WhoAnswer {
		a := who("node-a")
		a.Items[0].Processes = p
		return a
	}
	tree := aliceView()
	tree.Processes, tree.Claimants = append(tree.Processes, ps[1]), nil
	tree.Tree = api.BuildTree(tree.Processes)
	for _, tc := range []struct {
		name  string
		print func(*Printer) error
		want  []string
		not   []string
	}{
		{"process table", func(p *Printer) error { return p.ProcessPage(api.ProcessPage{Items: ps}) },
			[]string{"pending until 2026-03-04T10:05:08Z", "pending until 2026-03-04T10:01:09Z",
				hint("2 processes", "2026-03-04T10:05:08Z")}, nil},
		{"process table, one", func(p *Printer) error { return p.ProcessPage(api.ProcessPage{Items: rootOnly}) },
			[]string{hint("1 process", "2026-03-04T10:01:09Z")}, []string{"05:08"}},
		{"process table, none", func(p *Printer) error {
			return p.ProcessPage(api.ProcessPage{Items: []join.Process{passed}})
		}, nil, []string{"pending", "ask again"}},
		{"session claimant", func(p *Printer) error { return p.Session(pendingView()) },
			[]string{"(pending: waiting for its audit record until 2026-03-04T10:05:08Z)",
				hint("1 process", "2026-03-04T10:05:08Z")}, nil},
		{"session tree", func(p *Printer) error { return p.Session(tree) },
			[]string{"51 bash (pending: waiting for its pod's exec records until 2026-03-04T10:01:09Z)",
				hint("1 process", "2026-03-04T10:01:09Z")}, nil},
		{"session, none", func(p *Printer) error { return p.Session(bobView()) }, nil, []string{"pending", "ask again"}},
		{"who wide", func(p *Printer) error { return p.Who(asWho(ps)) },
			[]string{"pid 50: sh (pending: waiting for its audit record until 2026-03-04T10:05:08Z)",
				"pid 52: nginx (-)", hint("2 processes", "2026-03-04T10:05:08Z")}, nil},
		{"who wide, none", func(p *Printer) error { return p.Who(asWho([]join.Process{passed})) },
			nil, []string{"pending", "ask again"}},
		// The minute before an ID-less root's record: no session, but not nobody.
		{"who, a root with no session yet", func(p *Printer) error {
			a := who("node-a")
			a.Items, a.Pending = nil, rootOnly
			return p.Who(a)
		}, []string{"No exec sessions recorded yet.",
			"(1 process in the pod with no session yet: who ran it is not known until 2026-03-04T10:01:09Z at the latest"},
			[]string{"No exec sessions recorded.\n"}},
		{"who, sessions and a root with none", func(p *Printer) error {
			a := who("node-a")
			a.Pending = append([]join.Process(nil), ps[:2]...)
			a.Pending[0].AuditID = a.Items[0].AuditID // in a listed session: that row says it
			return p.Who(a)
		}, []string{"(1 process in the pod with no session yet", "until 2026-03-04T10:01:09Z"}, []string{"05:08"}},
		{"who, nothing pending", func(p *Printer) error {
			a := who("node-a")
			a.Items = nil
			return p.Who(a)
		}, []string{"No exec sessions recorded.\n"}, []string{"yet", "ask again"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b strings.Builder
			if err := tc.print(New(&b, Wide)); err != nil {
				t.Fatal(err)
			}
			for _, s := range tc.want {
				if !strings.Contains(b.String(), s) {
					t.Errorf("want %q in:\n%s", s, b.String())
				}
			}
			for _, s := range tc.not {
				if strings.Contains(b.String(), s) {
					t.Errorf("want no %q in:\n%s", s, b.String())
				}
			}
		})
	}
}
