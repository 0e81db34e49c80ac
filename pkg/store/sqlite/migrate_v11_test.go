package sqlite

import (
	"slices"
	"testing"

	"github.com/execid/correlator/pkg/store"
)

// TestMigrateFromV11: a version-11 file gains the command lines' index, and
// a command search finds what it found before the upgrade.
func TestMigrateFromV11(t *testing.T) {
	w := newRunWorld(t, 3)
	for i := range 6 {
		w.batch(i*40, 1+w.rng.IntN(40))
	}
	filters := []store.ProcessFilter{{Command: "step 3"}, {Command: "-c", Limit: 5}}
	var before [][]string
	for _, f := range filters {
		before = append(before, canonical(t, everyProcess(t, w.runs, f), true))
	}
	path := olderCopy(t, w.runs, "v11.db", append(slices.Clone(undoV14), `DROP INDEX commands_line`, `PRAGMA user_version = 11`)...)

	s := openMigrated(t, path)
	var n int
	if err := s.r.QueryRow(`SELECT count(*) FROM sqlite_schema WHERE type = 'index' AND name = 'commands_line'`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("commands_line after the upgrade: %d, %v", n, err)
	}
	for i, f := range filters {
		if got := canonical(t, everyProcess(t, s, f), true); !slices.Equal(got, before[i]) || len(got) == 0 {
			t.Fatalf("ListProcesses(%+v) after the upgrade: %d processes, want %d (and some)", f, len(got), len(before[i]))
		}
	}
}
