package sqlite

import (
	"context"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/execid/correlator/pkg/auditlog"
	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/store"
)

// TestMigrateFromV1 builds a version-1 file (the sessions table without
// the exec options) and checks that Open upgrades it in place and that the
// new columns round-trip.
func TestMigrateFromV1(t *testing.T) {
	db, path := oldFile(t, 1, func(stmt string) string {
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
	if err != nil || old.User.Username != "alice" || (old.TTY != nil && *old.TTY) || old.Env != nil {
		t.Fatalf("old session after migration: %+v, %v", old.Session, err)
	}
	yes := true
	in := join.Session{ExecRecord: auditlog.ExecRecord{AuditID: "new", User: auditlog.UserInfo{Username: "bob"},
		RequestReceivedTimestamp: base, Env: []string{"LD_PRELOAD=/x.so"}, Stdin: &yes, TTY: &yes}}
	if err := s.Write(ctx, store.Batch{Sessions: []join.Session{in}}); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetSession(ctx, "new")
	if err != nil || got.Stdin == nil || !*got.Stdin || got.TTY == nil || !*got.TTY || !slices.Equal(got.Env, in.Env) {
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

// TestMigrateFromV3 builds a version-3 file, whose rows lack what
// join.Session and join.Process added (ports, request URI, annotations,
// SPO UIDs, conflicts, exec time, argv truncation), and checks that Open
// adds the columns, that the old rows read back with those fields zero, and
// that the new fields round-trip.
func TestMigrateFromV3(t *testing.T) {
	db, path := oldFile(t, 3, nil)
	for _, q := range []string{
		`INSERT INTO sessions (audit_id, username, request_received, end_time, updated_at) VALUES ('old', 'alice', 1, 2, 1)`,
		`INSERT INTO processes (process_id, pid, start, exit_time, audit_id, attribution) VALUES ('p-old', 7, 5, 9, 'old', 'audit_id')`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()

	s := openAt(t, path)
	ctx := context.Background()
	old, err := s.GetSession(ctx, "old")
	if err != nil || old.User.Username != "alice" || old.RequestURI != "" || old.Ports != nil || old.Conflicts != nil ||
		old.EndTimestamp.UnixNano() != 2 || old.ProcessCount != 1 {
		t.Fatalf("old session after migration: %+v, %v", old.Session, err)
	}
	if p := old.Processes[0]; p.PID != 7 || !p.ExecTime.IsZero() || p.ArgvTruncated || p.Exit.UnixNano() != 9 {
		t.Fatalf("old process after migration: %+v", p)
	}

	ss := session("new", "bob", 0)
	ss.Ports, ss.RequestURI, ss.SPOExecRequestUID = []string{"80"}, "/api/v1/namespaces/default/pods/web-0/exec", "spo-1"
	ss.Annotations = map[string]string{"authorization.k8s.io/decision": "allow"}
	ss.Conflicts = []auditlog.ExecRecord{session("new", "mallory", 1).ExecRecord}
	p := process("p-new", "new", 1)
	p.ExecTime, p.ArgvTruncated, p.SPOExecRequestUID = base.Add(time.Minute), true, "spo-1"
	mustUpsert(t, s, []join.Session{ss}, []join.Process{p})
	got, err := s.GetSession(ctx, "new")
	if err != nil {
		t.Fatal(err)
	}
	want := ss
	want.ProcessCount, want.FirstProcess, want.LastProcess = 1, p.Start, p.Start
	if !reflect.DeepEqual(got.Session, want) || !reflect.DeepEqual(got.Processes, []join.Process{p}) {
		t.Fatalf("after migration:\n got %+v %+v\nwant %+v %+v", got.Session, got.Processes, want, p)
	}
	var v int
	if err := s.r.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v); err != nil || v != schemaVersion {
		t.Fatalf("user_version = %d, %v", v, err)
	}
}
