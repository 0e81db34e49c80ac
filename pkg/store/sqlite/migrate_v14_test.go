package sqlite

import "testing"

// TestMigrateFromV14: a version-14 file's processes rows gain their
// command index, and a command search, its rows read by command or
// walked, finds what it found before the upgrade.
func TestMigrateFromV14(t *testing.T) {
	w, searches := commandSearchWorld(t, 5)
	path := olderCopy(t, w.runs, "v14.db", `DROP INDEX processes_command`, `PRAGMA user_version = 14`)

	s := openMigrated(t, path)
	var n int
	if err := s.r.QueryRow(`SELECT count(*) FROM sqlite_schema WHERE type = 'index' AND name = 'processes_command'`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("processes_command after the upgrade: %d, %v", n, err)
	}
	for _, rows := range []int{1 << 20, 1} {
		s.cfg.CommandRows = rows
		searches.check(t, s)
	}
}
