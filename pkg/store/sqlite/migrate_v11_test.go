package sqlite

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/execid/correlator/pkg/store"
	"github.com/rs/zerolog"
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
	path := filepath.Join(t.TempDir(), "v11.db")
	if _, err := w.runs.w.Exec(`VACUUM INTO ?`, path); err != nil {
		t.Fatal(err)
	}
	v11, err := Open(path, Config{SessionProcessLimit: 1 << 20}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{`DROP INDEX commands_line`, `PRAGMA user_version = 11`} {
		if _, err := v11.w.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	v11.Close()

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
