package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/store"
)

// auditRecordsV2 is audit_records as versions 1 and 2 made it, keyed by
// (audit_id, stage) alone.
const auditRecordsV2 = `CREATE TABLE audit_records (
		audit_id        TEXT NOT NULL,
		stage           TEXT NOT NULL,
		stage_timestamp INTEGER NOT NULL,
		event           TEXT NOT NULL,
		PRIMARY KEY (audit_id, stage)
	) WITHOUT ROWID`

// v4Columns are the columns version 4 added.
var v4Columns = regexp.MustCompile(`,\s*(ports|request_uri|annotations|spo_request_uid|conflicts|exec_time|argv_truncated)\s[^,\n]*`)

// processesIndexesV4 are the process indexes version 5 replaced.
const processesIndexesV4 = `CREATE INDEX processes_attribution ON processes (attribution, start);
	CREATE INDEX processes_exit ON processes (exit_time) WHERE exit_time IS NOT NULL`

// createOldSchema creates schemaV1 as version (1 to 4) had it: with
// version 4's process indexes, without version 4's columns (before 4), and with audit_records as version 2 had it before
// version 3; it passes every other statement through edit (nil keeps it;
// an empty result skips it), and sets user_version.
// oldFile creates a file at version's schema (createOldSchema) and
// returns it open, with its path, for a migration test to fill and Open.
func oldFile(t *testing.T, version int, edit func(string) string) (*sql.DB, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), fmt.Sprintf("v%d.db", version))
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	createOldSchema(t, db, version, edit)
	return db, path
}

// openMigrated opens an old file, which Open upgrades in place, and checks
// that it is at this build's schema version.
func openMigrated(t *testing.T, path string) *Store {
	t.Helper()
	s := openAt(t, path)
	var v int
	if err := s.r.QueryRow("PRAGMA user_version").Scan(&v); err != nil || v != schemaVersion {
		t.Fatalf("user_version = %d, %v", v, err)
	}
	return s
}

// processesTableV7 is the processes table of versions 1 to 7 (at 7:
// before it, command_id was argv and argv_line, commandIDColumn); version
// 8 moved the columns no query reads alone into detail. Its indexes were
// processesTable's.
const processesTableV7 = `CREATE TABLE processes (
		id                INTEGER PRIMARY KEY,
		process_id        TEXT NOT NULL UNIQUE,
		parent_process_id TEXT NOT NULL DEFAULT '',
		pid               INTEGER NOT NULL DEFAULT 0,
		ppid              INTEGER NOT NULL DEFAULT 0,
		uid               INTEGER NOT NULL DEFAULT 0,
		filename          TEXT NOT NULL DEFAULT '',
		command_id        INTEGER NOT NULL DEFAULT 0,
		container_id      TEXT NOT NULL DEFAULT '',
		pod_uid           TEXT NOT NULL DEFAULT '',
		namespace         TEXT NOT NULL DEFAULT '',
		pod               TEXT NOT NULL DEFAULT '',
		container         TEXT NOT NULL DEFAULT '',
		start             INTEGER NOT NULL,
		exit_time         INTEGER,
		exit_code         INTEGER,
		audit_id          TEXT NOT NULL DEFAULT '',
		claimed_audit_id  TEXT NOT NULL DEFAULT '',
		attribution       TEXT NOT NULL DEFAULT '',
		confidence        REAL NOT NULL DEFAULT 0,
		candidates        TEXT,
		source            TEXT NOT NULL DEFAULT '',
		flags             TEXT,
		session_root_id   TEXT NOT NULL DEFAULT '',
		exec_time         INTEGER NOT NULL DEFAULT 0,
		argv_truncated    INTEGER NOT NULL DEFAULT 0,
		spo_request_uid   TEXT NOT NULL DEFAULT ''
	)`

// commandIDColumn is the column version 7 put in place of argv and
// argv_line, which versions 1 to 6 had.
const (
	commandIDColumn = `command_id        INTEGER NOT NULL DEFAULT 0,`
	argvColumnsV6   = `argv              TEXT,
		argv_line         TEXT NOT NULL DEFAULT '',`
)

// upsertProcessHeadV7 and oldProcessArgs write a process row of version 7:
// its 26 columns as that version's writer bound them, command the
// command's id.
const upsertProcessHeadV7 = `INSERT INTO processes (
	process_id, parent_process_id, pid, ppid, uid, filename, command_id, container_id, pod_uid,
	namespace, pod, container, start, exit_time, exit_code, audit_id, claimed_audit_id, attribution,
	confidence, candidates, source, flags, session_root_id, exec_time, argv_truncated, spo_request_uid
) VALUES `

func oldProcessArgs(p *join.Process, command any) []any {
	var exitCode any
	if p.ExitCode != nil {
		exitCode = int64(*p.ExitCode)
	}
	var e encoder
	return []any{
		p.ProcessID, p.ParentProcessID, int64(p.PID), int64(p.PPID), int64(p.UID), p.Filename, command,
		p.ContainerID, p.PodUID, p.Namespace, p.Pod, p.Container,
		nanos(p.Start), nullNanos(p.Exit), exitCode, p.AuditID, p.ClaimedAuditID, string(p.Attribution),
		p.Confidence, e.json(p.Candidates), string(p.Source), e.json(p.Flags), p.SessionRootID,
		nanos(p.ExecTime), p.ArgvTruncated, p.SPOExecRequestUID,
	}
}

// insertOldProcesses writes ps into a file of version 4 to 6 as its writer
// did: version 7's columns, with the argv's JSON and line in place of the
// command's id.
func insertOldProcesses(t *testing.T, db *sql.DB, ps ...join.Process) {
	t.Helper()
	head := strings.Replace(upsertProcessHeadV7, "command_id,", "argv, argv_line,", 1)
	row := "(" + placeholders(27) + ")" // command_id's place holds two
	for _, p := range ps {
		args := oldProcessArgs(&p, nil)
		// args[6] is command_id: the argv's JSON (NULL when empty) and line go there.
		args = append(args[:6:6], append([]any{(&encoder{}).json(p.Argv), strings.Join(p.Argv, " ")}, args[7:]...)...)
		if _, err := db.Exec(head+row, args...); err != nil {
			t.Fatal(err)
		}
	}
}

func createOldSchema(t *testing.T, db *sql.DB, version int, edit func(string) string) {
	t.Helper()
	for _, stmt := range schemaV1 {
		if version < 9 && slices.Contains(runTables, stmt) || version < 11 && slices.Contains(runCommandTables, stmt) ||
			version < 12 && stmt == commandsLineIndex || version < 14 && (stmt == runCommandsBound[0] || stmt == commandsSpanIndex) {
			continue
		}
		if version < 13 && stmt == processRunsAuditIndex {
			stmt = `CREATE INDEX process_runs_audit ON process_runs (audit_id, last_start)`
		}
		if version < 10 {
			if stmt == alertsProcessIndex {
				continue
			}
			stmt = strings.Replace(stmt, alertStatusColumns, "", 1)
		}
		if version < 8 && stmt == processesTable[0] {
			stmt = processesTableV7
		}
		if version < 4 {
			stmt = v4Columns.ReplaceAllString(stmt, "")
		}
		if version < 6 {
			stmt = strings.Replace(stmt, sideAuditIDColumn, "", 1)
		}
		if version < 7 {
			if stmt == commandsTable {
				continue
			}
			stmt = strings.Replace(stmt, commandIDColumn, argvColumnsV6, 1)
		}
		if version < 5 && stmt == processesAttributionIndex {
			stmt = processesIndexesV4
		}
		if version < 3 && strings.HasPrefix(strings.TrimSpace(stmt), "CREATE TABLE audit_records") {
			stmt = auditRecordsV2
		} else if edit != nil {
			stmt = edit(stmt)
		}
		if stmt == "" {
			continue
		}
		if _, err := db.Exec(stmt); err != nil {
			t.Fatalf("creating version %d schema: %v", version, err)
		}
	}
	if _, err := db.Exec(fmt.Sprintf("PRAGMA user_version = %d", version)); err != nil {
		t.Fatal(err)
	}
}

// auditEvent is a streaming exec audit event for a request by user from
// ip, received at base+recv seconds.
func auditEvent(id, stage, user, ip string, recv int) store.AuditRecord {
	t := base.Add(time.Duration(recv) * time.Second)
	ev := fmt.Sprintf(`{"kind":"Event","apiVersion":"audit.k8s.io/v1","auditID":%q,"stage":%q,`+
		`"requestURI":"/api/v1/namespaces/prod/pods/web-0/exec?command=sh","verb":"create",`+
		`"user":{"username":%q},"sourceIPs":[%q],"requestReceivedTimestamp":%q}`,
		id, stage, user, ip, t.Format(time.RFC3339Nano))
	return store.AuditRecord{AuditID: id, Stage: stage, StageTimestamp: t.Add(time.Second), Event: []byte(ev)}
}

// TestMigrateFromV2 builds a version-2 file, whose audit_records were
// keyed by (audit_id, stage), and checks that Open keys the stored records
// by request: a redelivery still replaces its row, and a different request
// with the same audit ID is kept beside it.
func TestMigrateFromV2(t *testing.T) {
	db, path := oldFile(t, 2, nil)
	victim := auditEvent("shared", "ResponseStarted", "alice", "10.0.0.1", 0)
	other := auditEvent("other", "ResponseComplete", "bob", "10.0.0.2", 3)
	for _, r := range []store.AuditRecord{victim, other} {
		if _, err := db.Exec(`INSERT INTO audit_records (audit_id, stage, stage_timestamp, event) VALUES (?,?,?,?)`,
			r.AuditID, r.Stage, r.StageTimestamp.UnixNano(), string(r.Event)); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()

	s := openAt(t, path)
	ctx := context.Background()
	var keys int
	if err := s.r.QueryRowContext(ctx, `SELECT count(*) FROM audit_records WHERE request_key = ? OR request_key = ?`,
		victim.RequestKey(), other.RequestKey()).Scan(&keys); err != nil || keys != 2 {
		t.Fatalf("records keyed by request after migration: %d, %v", keys, err)
	}
	intruder := auditEvent("shared", "ResponseStarted", "mallory", "10.0.0.66", 5)
	if err := s.Write(ctx, store.Batch{AuditRecords: []store.AuditRecord{victim, intruder}}); err != nil {
		t.Fatal(err)
	}
	var rows int
	if err := s.r.QueryRowContext(ctx, `SELECT count(*) FROM audit_records WHERE audit_id = 'shared'`).Scan(&rows); err != nil || rows != 2 {
		t.Fatalf("records of the reused ID = %d, want the victim's and the intruder's: %v", rows, err)
	}
	var idx int
	if err := s.r.QueryRowContext(ctx, "SELECT count(*) FROM sqlite_master WHERE name = 'audit_records_time'").Scan(&idx); err != nil || idx != 1 {
		t.Fatalf("audit_records_time index after migration: %d, %v", idx, err)
	}
	if res, err := s.IntegrityCheck(ctx); err != nil || res != "ok" {
		t.Fatalf("integrity check: %q, %v", res, err)
	}
}

// TestAuditIDReuseKeepsBoth checks at the table that a conflicting request
// adds a row, and that a redelivery does not.
func TestAuditIDReuseKeepsBoth(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	victim := auditEvent("shared", "ResponseStarted", "alice", "10.0.0.1", 0)
	intruder := auditEvent("shared", "ResponseStarted", "mallory", "10.0.0.66", 5)
	for _, b := range []store.Batch{{AuditRecords: []store.AuditRecord{victim}}, {AuditRecords: []store.AuditRecord{victim, intruder}},
		{AuditRecords: []store.AuditRecord{intruder}}} {
		if err := s.Write(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	var users []string
	rows, err := s.r.QueryContext(ctx, `SELECT json_extract(event, '$.user.username') FROM audit_records
		WHERE audit_id = 'shared' ORDER BY stage_timestamp`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var u string
		if err := rows.Scan(&u); err != nil {
			t.Fatal(err)
		}
		users = append(users, u)
	}
	if strings.Join(users, ",") != "alice,mallory" {
		t.Fatalf("stored records of the reused ID by user = %v, want alice,mallory", users)
	}
}
