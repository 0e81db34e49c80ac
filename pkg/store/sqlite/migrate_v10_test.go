package sqlite

import (
	"slices"
	"testing"

	"github.com/execid/correlator/pkg/store"
)

// TestMigrateFromV10: a version-10 file's runs gain the list of their
// commands, read from their lines, and a command search finds in them
// what it found before the upgrade (when it read every run's body), by
// either of its ways.
func TestMigrateFromV10(t *testing.T) {
	w := newRunWorld(t, 3)
	for i := range 8 {
		w.batch(i*40, 1+w.rng.IntN(40))
	}
	filters := []store.ProcessFilter{{Command: "step 3"}, {Command: "-c", Limit: 5}, {Command: "step", Pod: "web-1"}}
	var before [][]string
	for _, f := range filters {
		before = append(before, canonical(t, everyProcess(t, w.runs, f), true))
	}
	// The same file at version 10: no list, no trigger.
	path := olderCopy(t, w.runs, "v10.db", `DROP TRIGGER process_runs_forget_commands`, `DROP TABLE process_run_commands`,
		`DROP INDEX commands_span`, `PRAGMA user_version = 10`)

	s := openMigrated(t, path)
	checkRunCommands(t, s)
	for i, f := range filters {
		for _, limit := range []int{1 << 20, 1} {
			s.cfg.CommandRuns = limit
			if got := canonical(t, everyProcess(t, s, f), true); !slices.Equal(got, before[i]) || len(got) == 0 {
				t.Fatalf("ListProcesses(%+v) after the upgrade, %d runs looked up: %d processes, want %d (and some)",
					f, limit, len(got), len(before[i]))
			}
		}
	}
}
