package sqlite

import (
	"context"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"github.com/rs/zerolog"

	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/store"
)

// TestMigrateFromV12: a version-12 file's process_runs_audit gains the
// runs' bounds and counts, and its sessions list with the counts and
// bounds they had before the upgrade.
func TestMigrateFromV12(t *testing.T) {
	w := newRunWorld(t, 5)
	for i := range 6 {
		w.batch(i*40, 1+w.rng.IntN(40))
	}
	list := func(s *Store) []join.Session {
		page, _, err := s.ListSessions(context.Background(), store.SessionFilter{Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		return page
	}
	before := list(w.runs)
	counted := 0
	for _, ss := range before {
		counted += ss.ProcessCount
	}
	if counted == 0 {
		t.Fatal("no session counts a process: the comparison below would hold without the index")
	}
	path := olderCopy(t, w.runs, "v12.db", append(slices.Clone(undoV14), `DROP INDEX process_runs_audit`,
		`CREATE INDEX process_runs_audit ON process_runs (audit_id, last_start)`, `PRAGMA user_version = 12`)...)

	s := openMigrated(t, path)
	var n int
	if err := s.r.QueryRow(`SELECT count(*) FROM pragma_index_info('process_runs_audit')`).Scan(&n); err != nil || n != 4 {
		t.Fatalf("process_runs_audit after the upgrade: %d columns, %v; want 4", n, err)
	}
	if got := list(s); !reflect.DeepEqual(got, before) {
		t.Fatalf("sessions after the upgrade differ:\n got %+v\nwant %+v", got, before)
	}
}

// olderCopy copies s's file to name in a temporary directory and runs
// stmts on the copy, which take it back to an older version: the upgrade
// tests' files, made from this schema.
func olderCopy(t *testing.T, s *Store, name string, stmts ...string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if _, err := s.w.Exec(`VACUUM INTO ?`, path); err != nil {
		t.Fatal(err)
	}
	old, err := Open(path, Config{SessionProcessLimit: 1 << 20}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	for _, q := range stmts {
		if _, err := old.w.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	return path
}
