package sqlite

import (
	"slices"
	"testing"
)

// undoV14 takes a file made from this schema back to version 13.
var undoV14 = []string{`ALTER TABLE process_run_commands DROP COLUMN last_start`, `DROP INDEX commands_span`}

// TestMigrateFromV13: a version-13 file's run commands gain their runs'
// last starts and the commands their span index, and a command search,
// its runs listed or walked, finds what it found before the upgrade.
func TestMigrateFromV13(t *testing.T) {
	w, searches := commandSearchWorld(t, 4)
	path := olderCopy(t, w.runs, "v13.db", append(slices.Clone(undoV14), `PRAGMA user_version = 13`)...)

	s := openMigrated(t, path)
	checkRunCommands(t, s)
	var exact, n int
	if err := s.r.QueryRow(`SELECT count(*) FROM process_run_commands c JOIN process_runs r ON r.id = c.run
		WHERE c.last_start = r.last_start`).Scan(&exact); err != nil {
		t.Fatal(err)
	}
	if exact == 0 {
		t.Fatal("no run's commands hold its last start after the upgrade")
	}
	if err := s.r.QueryRow(`SELECT count(*) FROM sqlite_schema WHERE type = 'index' AND name = 'commands_span'`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("commands_span after the upgrade: %d, %v", n, err)
	}
	searches.check(t, s)
}
