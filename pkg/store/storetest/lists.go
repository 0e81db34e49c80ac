package storetest

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/execid/correlator/pkg/auditlog"
	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/store"
)

// testEmptyLists checks that what the API serves as arrays reads back as
// [] where it was written empty or nil, never as null.
func testEmptyLists(t *testing.T, s store.Backend) {
	ctx := context.Background()
	ss := session("s1", "alice", 0)
	other := session("s1", "mallory", 7).ExecRecord
	ss.Stages, other.Stages = nil, []string{}
	ss.Conflicts = []auditlog.ExecRecord{other}
	p := process("p1", "s1", 1)
	p.Flags = nil
	claimant := process("p2", "", 2)
	claimant.ClaimedAuditID, claimant.Flags = "s1", []string{}
	write(t, s, store.Batch{Sessions: []join.Session{ss, session("s2", "bob", 3)},
		Processes: []join.Process{p, claimant}})

	noNulls := func(what string, v any, keys ...string) {
		t.Helper()
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			if strings.Contains(string(b), `"`+k+`":null`) {
				t.Errorf("%s: %q is null: %s", what, k, b)
			}
		}
	}
	d, err := s.GetSession(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	noNulls("session detail", d, "stages", "flags", "processes")
	if len(d.Conflicts) != 1 || len(d.Processes) != 1 || len(d.Claimants) != 1 {
		t.Fatalf("session detail: %d conflicts, %d processes, %d claimants", len(d.Conflicts), len(d.Processes), len(d.Claimants))
	}
	d, err = s.GetSession(ctx, "s2")
	if err != nil {
		t.Fatal(err)
	}
	noNulls("session without processes", d, "processes")

	sessions, _, err := s.ListSessions(ctx, store.SessionFilter{})
	if err != nil {
		t.Fatal(err)
	}
	noNulls("listed sessions", sessions, "stages")
	processes, _, err := s.ListProcesses(ctx, store.ProcessFilter{})
	if err != nil {
		t.Fatal(err)
	}
	noNulls("listed processes", processes, "flags")

	// A page of nothing is an empty list.
	noneS, _, err := s.ListSessions(ctx, store.SessionFilter{User: "nobody"})
	if err != nil || noneS == nil {
		t.Errorf("ListSessions of nothing = %#v, %v", noneS, err)
	}
	for _, f := range []store.ProcessFilter{{Pod: "nowhere"}, {User: "nobody"}} {
		noneP, _, err := s.ListProcesses(ctx, f)
		if err != nil || noneP == nil {
			t.Errorf("ListProcesses(%+v) of nothing = %#v, %v", f, noneP, err)
		}
	}
	noneA, _, err := s.ListAlerts(ctx, store.AlertFilter{Rule: "none"})
	if err != nil || noneA == nil {
		t.Errorf("ListAlerts of nothing = %#v, %v", noneA, err)
	}
}
