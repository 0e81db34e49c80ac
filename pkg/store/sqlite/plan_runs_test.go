package sqlite

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/execid/correlator/pkg/store"
	"github.com/execid/correlator/pkg/vocab"
)

// TestRunQueryPlans: every search of the runs walks an index in page
// order, bounded in time where the filter is; the writer's lookup of
// stored processes probes the keys, never scans the processes; and
// retention finds a command's runs by their first start.
func TestRunQueryPlans(t *testing.T) {
	s := openTest(t)
	day := base.Add(24 * time.Hour)
	cur := cursor{t: 1, id: 1}
	for _, tc := range []struct {
		f      store.ProcessFilter
		broad  bool
		cursor bool
		index  string
	}{
		{store.ProcessFilter{}, false, false, "process_runs_start"},
		{store.ProcessFilter{Since: base, Until: day}, false, true, "process_runs_start (last_start>? AND last_start<?)"},
		{store.ProcessFilter{Pod: "p"}, false, true, "process_runs_pod (pod=? AND last_start<?)"},
		{store.ProcessFilter{Namespace: "n"}, false, false, "process_runs_namespace"},
		{store.ProcessFilter{Container: "c"}, false, false, "process_runs_container"},
		{store.ProcessFilter{AuditID: "a"}, false, false, "process_runs_audit"},
		{store.ProcessFilter{Attribution: vocab.AttributionInherited}, false, false, "process_runs_attribution"},
		{store.ProcessFilter{Unattributed: true, Since: base}, false, true, "process_runs_attribution (attribution=? AND last_start>? AND last_start<?)"},
		{store.ProcessFilter{Command: "curl"}, false, false, "process_runs_start (last_start>? AND last_start<?)"}, // no ids: none named
		// A broad user's runs are walked in page order, each looked up.
		{store.ProcessFilter{User: "alice"}, true, false, "process_runs_start"},
	} {
		rs := processRunSearch(tc.f, tc.broad, commandMatch{first: 1, last: 2}, cur, tc.cursor)
		q := `SELECT r.id, r.last_start FROM process_runs r` + rs.where.String() + ` ORDER BY r.last_start DESC, r.id DESC`
		plan := queryPlan(t, s, q, rs.where.args)
		t.Logf("runs %+v: %s", tc.f, plan)
		checkPlan(t, plan, tc.index)
	}
	// A command's runs: a rare one's listed with their bounds from the
	// commands' index alone, then each read by id; a common one's in page
	// order, each probed for the command before its body is read.
	for _, few := range []bool{true, false} {
		m := commandMatch{first: 1, last: 2, ids: []any{int64(5), int64(7)}, set: map[int64]bool{5: true, 7: true}, fewRuns: few}
		rs := processRunSearch(store.ProcessFilter{Command: "curl", Pod: "p"}, false, m, cur, false)
		plan := queryPlan(t, s, rs.query(), rs.where.args)
		want := []string{"SEARCH r USING INDEX process_runs_pod (pod=? AND last_start>? AND last_start<?)",
			"SEARCH c EXISTS USING COVERING INDEX process_run_commands_run (run=? AND command_id=?)"}
		if few {
			plan = queryPlan(t, s, commandRunsSQL(m), append(slices.Clone(m.ids), 10)) + "; " +
				queryPlan(t, s, rs.readQuery(), append([]any{int64(1)}, rs.where.args...))
			want = []string{"SEARCH process_run_commands USING PRIMARY KEY (command_id=?)", "SEARCH r USING INTEGER PRIMARY KEY (rowid=?)"}
		}
		t.Logf("runs of a command (few %v): %s", few, plan)
		for _, w := range want {
			if !strings.Contains(plan, w) {
				t.Errorf("plan %q: want %q", plan, w)
			}
		}
		if strings.Contains(plan, "TEMP B-TREE") || strings.Contains(plan, "SCAN") {
			t.Errorf("plan %q: a command's runs must be read from indexes, not sorted or scanned", plan)
		}
	}
	// A narrow user's runs are probed by their sessions' IDs and sorted:
	// ids and times alone.
	rs := processRunSearch(store.ProcessFilter{Group: "g"}, false, commandMatch{}, cur, false)
	plan := queryPlan(t, s, `SELECT r.id, r.last_start FROM process_runs r`+rs.where.String()+
		` ORDER BY r.last_start DESC, r.id DESC`, rs.where.args)
	t.Logf("runs of a group: %s", plan)
	if !strings.Contains(plan, "process_runs_audit (audit_id=?)") {
		t.Errorf("plan %q: want the group's sessions' runs by process_runs_audit", plan)
	}
	plan = queryPlan(t, s, storedKeysSQL, []any{`["1-1"]`})
	t.Logf("stored keys: %s", plan)
	if strings.Contains(plan, "SCAN k") || strings.Contains(plan, "SCAN p") || !strings.Contains(plan, "SEARCH k USING PRIMARY KEY") ||
		!strings.Contains(plan, "SEARCH p USING COVERING INDEX sqlite_autoindex_processes_1") {
		t.Errorf("plan %q: want each ID probed in the keys and the processes' key index", plan)
	}
	plan = queryPlan(t, s, deleteCommandsSQL, []any{1, 10})
	if !strings.Contains(plan, "process_runs_first (first_start<?)") {
		t.Errorf("plan %q: want a command's runs by their first start", plan)
	}
	for col, index := range map[string]string{"audit_id": "process_runs_audit", "claimed_audit_id": "process_runs_claimed"} {
		plan := queryPlan(t, s, `SELECT r.id, r.last_start FROM process_runs r WHERE r.`+col+` = ? AND r.`+col+
			` != '' ORDER BY r.last_start, r.id`, []any{"a"})
		checkPlan(t, plan, index)
	}
}
