package sqlite

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/execid/correlator/pkg/store"
	"github.com/execid/correlator/pkg/vocab"
)

// queryPlan returns EXPLAIN QUERY PLAN's detail lines for q.
func queryPlan(t *testing.T, s *Store, q string, args []any) string {
	t.Helper()
	rows, err := s.r.QueryContext(context.Background(), "EXPLAIN QUERY PLAN "+q, args...)
	if err != nil {
		t.Fatalf("explaining %s: %v", q, err)
	}
	defer rows.Close()
	var lines []string
	for rows.Next() {
		var id, parent, unused int
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			t.Fatal(err)
		}
		lines = append(lines, detail)
	}
	return strings.Join(lines, "; ")
}

// TestQueryPlans checks that every filter is answered from an index walked
// in page order, with no full scan and no sort of the matches, on an empty
// store (no planner statistics), which is where a fresh agent starts.
func TestQueryPlans(t *testing.T) {
	s := openTest(t)
	day := base.Add(24 * time.Hour)
	cur := cursor{t: 1, id: 1}.String()
	sessions := []struct {
		f     store.SessionFilter
		index string
	}{
		{store.SessionFilter{}, "sessions_received"},
		{store.SessionFilter{Cursor: cur}, "sessions_received"},
		{store.SessionFilter{Since: base, Until: day}, "sessions_received"},
		{store.SessionFilter{User: "alice", Since: base, Until: day}, "PRIMARY KEY"},
		{store.SessionFilter{User: "alice", Group: "g", Cursor: cur}, "PRIMARY KEY"},
		{store.SessionFilter{Group: "g", Since: base, Until: day, Cursor: cur}, "PRIMARY KEY"},
		{store.SessionFilter{Namespace: "ns", Cursor: cur}, "sessions_namespace"},
		{store.SessionFilter{Pod: "p", Since: base}, "sessions_pod"},
		{store.SessionFilter{Container: "c"}, "sessions_container"},
		// A command: only the span of the matching commands is walked.
		{store.SessionFilter{Command: "rm"}, "sessions_received (request_received>? AND request_received<?)"},
		{store.SessionFilter{Command: "rm", User: "alice"}, "PRIMARY KEY (username=? AND request_received>? AND request_received<?)"},
	}
	for _, tc := range sessions {
		q, args, err := sessionsListing(tc.f, commandMatch{ids: []any{int64(1)}, first: 1, last: 2}).query(tc.f.Cursor, 100)
		if err != nil {
			t.Fatal(err)
		}
		plan := queryPlan(t, s, q, args)
		t.Logf("sessions %+v: %s", tc.f, plan)
		checkPlan(t, plan, tc.index)
		// Each session's counts and bounds come from the audit indexes
		// alone: a run's row, with its body, is a page of its own.
		for _, ix := range []string{"processes_audit", "process_runs_audit"} {
			if !strings.Contains(plan, "USING COVERING INDEX "+ix+" (audit_id=?)") || strings.Contains(plan, "USING INDEX "+ix) {
				t.Errorf("sessions %+v: plan %q: want every aggregate by %s alone", tc.f, plan, ix)
			}
		}
	}
	procs := []struct {
		f     store.ProcessFilter
		index string
	}{
		{store.ProcessFilter{}, "processes_start"},
		{store.ProcessFilter{Since: base, Until: day, Cursor: cur}, "processes_start"},
		{store.ProcessFilter{Pod: "p", Cursor: cur}, "processes_pod"},
		{store.ProcessFilter{Pod: "p", Since: base, Until: day}, "processes_pod"},
		{store.ProcessFilter{Namespace: "n"}, "processes_namespace"},
		{store.ProcessFilter{Container: "c"}, "processes_container"},
		{store.ProcessFilter{AuditID: "a"}, "processes_audit"},
		{store.ProcessFilter{Attribution: vocab.AttributionAmbiguous}, "processes_attribution"},
		{store.ProcessFilter{Attribution: vocab.AttributionAuditID, Cursor: cur}, "processes_attribution"},
		// Inherited processes are most rows, and not in processes_attribution.
		{store.ProcessFilter{Attribution: vocab.AttributionInherited}, "processes_start"},
		// Unattributed ones are there.
		{store.ProcessFilter{Unattributed: true}, "processes_attribution (attribution=?)"},
		{store.ProcessFilter{Unattributed: true, Since: base, Until: day, Cursor: cur}, "processes_attribution (attribution=? AND start>? AND start<?)"},
	}
	for _, tc := range procs {
		q, args, err := processesListing(tc.f, false, commandMatch{}).query(tc.f.Cursor, 100)
		if err != nil {
			t.Fatal(err)
		}
		plan := queryPlan(t, s, q, args)
		t.Logf("processes %+v: %s", tc.f, plan)
		checkPlan(t, plan, tc.index)
	}
	// A user's or group's processes are sorted (no index orders them):
	// the page's ids from processes_audit alone, probed with the IDs the
	// side table holds (not a sessions page per session of the user), then
	// only the page's rows. Both cut the query on a million processes.
	for _, f := range []store.ProcessFilter{{User: "alice"}, {Group: "g", Cursor: cur}} {
		q, args, err := processesListing(f, false, commandMatch{}).query(f.Cursor, 100)
		if err != nil {
			t.Fatal(err)
		}
		plan := queryPlan(t, s, q, args)
		t.Logf("processes %+v: %s", f, plan)
		if !strings.HasPrefix(plan, "SEARCH p USING INTEGER PRIMARY KEY (rowid=?)") ||
			!strings.Contains(plan, "USING COVERING INDEX processes_audit (audit_id=?") ||
			!strings.Contains(plan, "USING PRIMARY KEY (") || strings.Contains(plan, "SEARCH s ") {
			t.Errorf("plan %q: want the page's ids from processes_audit alone, probed with the side table's IDs", plan)
		}
	}
	// A command substring: processes_start walked over the span of the
	// matching commands alone, by their ids or (many) a subquery; alone or
	// with a pod, whose index then takes the span.
	for _, tc := range []struct {
		f     store.ProcessFilter
		m     commandMatch
		index string
	}{
		{store.ProcessFilter{Command: "curl"}, commandMatch{ids: []any{int64(1), int64(2)}, first: 1, last: 2}, "processes_start (start>? AND start<?)"},
		{store.ProcessFilter{Command: "curl"}, commandMatch{all: true, first: 1, last: 2}, "processes_start (start>? AND start<?)"},
		{store.ProcessFilter{Command: "curl", Pod: "p"}, commandMatch{ids: []any{int64(1)}, first: 1, last: 2}, "processes_pod (pod=? AND start>? AND start<?)"},
	} {
		q, args, err := processesListing(tc.f, false, tc.m).query("", 100)
		if err != nil {
			t.Fatal(err)
		}
		plan := queryPlan(t, s, q, args)
		t.Logf("processes %+v %+v: %s", tc.f, tc.m, plan)
		checkPlan(t, plan, tc.index)
	}
	// Retention's walk of the commands no process points to any more.
	plan := queryPlan(t, s, deleteCommandsSQL, []any{1, 10})
	t.Logf("commands to delete: %s", plan)
	if !strings.Contains(plan, "processes_start (start>? AND start<?)") ||
		!strings.Contains(plan, "sessions_received (request_received>? AND request_received<?)") {
		t.Errorf("plan %q: want each command's processes and sessions looked for within its span", plan)
	}
	// Retention's walk of the processes started before a cut.
	plan = queryPlan(t, s, processesBeforeSQL, []any{1, 0, 0, 10})
	t.Logf("processes started before a cut: %s", plan)
	checkPlan(t, plan, "processes_start")
	// A command search walks the lines' index, not the commands' rows.
	plan = queryPlan(t, s, matchCommandsSQL, []any{"rm"})
	t.Logf("command lines holding a substring: %s", plan)
	if !strings.Contains(plan, "COVERING INDEX commands_line") {
		t.Errorf("plan %q does not read commands_line alone", plan)
	}
	// A session's tree and its claimants.
	for col, index := range map[string]string{"audit_id": "processes_audit", "claimed_audit_id": "processes_claimed"} {
		plan := queryPlan(t, s, sessionProcessesSQL(col), []any{"a", 10})
		t.Logf("session processes by %s: %s", col, plan)
		checkPlan(t, plan, index)
	}
}

func checkPlan(t *testing.T, plan, index string) {
	t.Helper()
	// The main loop is the first line; correlated subqueries follow.
	main := strings.SplitN(plan, "; ", 2)[0]
	if !strings.Contains(main, index) {
		t.Errorf("plan %q does not use %s", plan, index)
	}
	if strings.Contains(plan, "TEMP B-TREE FOR ORDER BY") {
		t.Errorf("plan %q sorts", plan)
	}
}
