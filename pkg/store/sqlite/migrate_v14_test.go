package sqlite

import "testing"

// TestMigrateFromV14: a version-14 file's pod index gains each row's
// command, and a command search finds what it found before the upgrade.
func TestMigrateFromV14(t *testing.T) {
	w, searches := commandSearchWorld(t, 5)
	path := olderCopy(t, w.runs, "v14.db", `DROP INDEX processes_pod`,
		`CREATE INDEX processes_pod ON processes (pod, start)`, `PRAGMA user_version = 14`)

	s := openMigrated(t, path)
	var def string
	if err := s.r.QueryRow(`SELECT sql FROM sqlite_schema WHERE type = 'index' AND name = 'processes_pod'`).Scan(&def); err != nil || def != processesPodIndex {
		t.Fatalf("processes_pod after the upgrade: %q, %v; want %q", def, err, processesPodIndex)
	}
	searches.check(t, s)
}
