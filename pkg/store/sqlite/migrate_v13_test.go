package sqlite

import (
	"slices"
	"testing"

	"github.com/execid/correlator/pkg/store"
)

// undoV14 takes a file made from this schema back to version 13.
var undoV14 = []string{`ALTER TABLE process_run_commands DROP COLUMN last_start`, `DROP INDEX commands_span`}

// TestMigrateFromV13: a version-13 file's run commands gain their runs'
// last starts and the commands their span index, and a command search,
// its runs listed or walked, finds what it found before the upgrade.
func TestMigrateFromV13(t *testing.T) {
	w := newRunWorld(t, 4)
	for i := range 8 {
		w.batch(i*40, 1+w.rng.IntN(40))
	}
	filters := []store.ProcessFilter{{Command: "step 3"}, {Command: "-c", Limit: 5}, {Command: "step", Pod: "web-1"}}
	var before [][]string
	for _, f := range filters {
		before = append(before, canonical(t, everyProcess(t, w.runs, f), true))
	}
	path := olderCopy(t, w.runs, "v13.db", append(slices.Clone(undoV14), `PRAGMA user_version = 13`)...)

	s := openMigrated(t, path)
	checkRunCommands(t, s)
	var exact, n int
	if err := s.r.QueryRow(`SELECT count(*) FROM process_run_commands c JOIN process_runs r ON r.id = c.run
		WHERE c.last_start = r.last_start`).Scan(&exact); err != nil {
		t.Fatal(err)
	}
	if err := s.r.QueryRow(`SELECT count(*) FROM sqlite_schema WHERE type = 'index' AND name = 'commands_span'`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("commands_span after the upgrade: %d, %v", n, err)
	}
	if exact == 0 {
		t.Fatal("no run's commands hold its last start after the upgrade")
	}
	for i, f := range filters {
		for _, limit := range []int{1 << 20, 1} {
			s.cfg.CommandRuns = limit
			if got := canonical(t, everyProcess(t, s, f), true); !slices.Equal(got, before[i]) || len(got) == 0 {
				t.Fatalf("ListProcesses(%+v) after the upgrade, %d runs listed: %d processes, want %d (and some)",
					f, limit, len(got), len(before[i]))
			}
		}
	}
}
