package store

import (
	"context"
	"database/sql"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestMigrateFromV1 builds a version-1 file (the sessions table without
// the exec options) and checks that Open upgrades it in place and that the
// new columns round-trip.
func TestMigrateFromV1(t *testing.T) {
	path := filepath.Join(t.TempDir(), "v1.db")
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	createOldSchema(t, db, 1, func(stmt string) string {
		if strings.Contains(stmt, "processes_claimed") {
			return "" // added in version 2
		}
		return strings.Replace(stmt, `updated_at       INTEGER NOT NULL,
		env              TEXT,
		stdin            INTEGER NOT NULL DEFAULT 0,
		tty              INTEGER NOT NULL DEFAULT 0`, `updated_at       INTEGER NOT NULL`, 1)
	})
	if _, err := db.Exec(`INSERT INTO sessions (audit_id, username, request_received, updated_at) VALUES ('old', 'alice', 1, 1)`); err != nil {
		t.Fatal(err)
	}
	db.Close()

	s := openAt(t, path)
	ctx := context.Background()
	old, err := s.GetSession(ctx, "old")
	if err != nil || old.Username != "alice" || old.TTY || old.Env != nil {
		t.Fatalf("old session after migration: %+v, %v", old.Session, err)
	}
	in := Session{AuditID: "new", Username: "bob", RequestReceived: base, Env: []string{"LD_PRELOAD=/x.so"}, Stdin: true, TTY: true}
	if err := s.Write(ctx, Batch{Sessions: []Session{in}}); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetSession(ctx, "new")
	if err != nil || !got.Stdin || !got.TTY || !slices.Equal(got.Env, in.Env) {
		t.Fatalf("new session: %+v, %v", got.Session, err)
	}
	var idx int
	if err := s.r.QueryRowContext(ctx, "SELECT count(*) FROM sqlite_master WHERE name = 'processes_claimed'").Scan(&idx); err != nil || idx != 1 {
		t.Fatalf("processes_claimed index after migration: %d, %v", idx, err)
	}
	var v int
	if err := s.r.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v); err != nil || v != schemaVersion {
		t.Fatalf("user_version = %d, %v", v, err)
	}
}
