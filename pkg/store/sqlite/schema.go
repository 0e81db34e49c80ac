package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"

	"github.com/execid/correlator/pkg/store"
	"github.com/execid/correlator/pkg/vocab"
)

// schemaVersion is stored in PRAGMA user_version. Bump it with a migration
// step in migrate when the schema changes.
const schemaVersion = 14

// schemaV1 is the current schema, which a new file is created with (its
// name is historical). Times are INTEGER nanoseconds since the Unix epoch,
// 0 for the zero time, NULL where the zero time means "not yet" (a session
// not seen to end, a process still running); lists, maps and records are
// JSON text, NULL when empty.
// Every list and keyset ordering is (time DESC, id DESC), where id is the
// table's INTEGER PRIMARY KEY (its rowid, which every secondary index ends
// in), so a filtered page walks one (column, time) index in order and
// stops at LIMIT. The id is declared, so VACUUM keeps it.
var schemaV1 = slices.Concat([]string{
	`CREATE TABLE sessions (
		id               INTEGER PRIMARY KEY,
		audit_id         TEXT NOT NULL UNIQUE,
		username         TEXT NOT NULL DEFAULT '',
		uid              TEXT NOT NULL DEFAULT '',
		groups           TEXT,
		extra            TEXT,
		impersonated     TEXT,
		source_ips       TEXT,
		user_agent       TEXT NOT NULL DEFAULT '',
		namespace        TEXT NOT NULL DEFAULT '',
		pod              TEXT NOT NULL DEFAULT '',
		container        TEXT NOT NULL DEFAULT '',
		command          TEXT,
		command_line     TEXT NOT NULL DEFAULT '',
		verb             TEXT NOT NULL DEFAULT '',
		subresource      TEXT NOT NULL DEFAULT '',
		code             INTEGER NOT NULL DEFAULT 0,
		decision         TEXT NOT NULL DEFAULT '',
		reason           TEXT NOT NULL DEFAULT '',
		request_received INTEGER NOT NULL,
		end_time         INTEGER,
		stages           TEXT,
		flags            TEXT,
		updated_at       INTEGER NOT NULL,
		env              TEXT,
		stdin            INTEGER NOT NULL DEFAULT 0,
		tty              INTEGER NOT NULL DEFAULT 0,
		ports            TEXT,
		request_uri      TEXT NOT NULL DEFAULT '',
		annotations      TEXT,
		spo_request_uid  TEXT NOT NULL DEFAULT '',
		conflicts        TEXT
	)`,
	`CREATE INDEX sessions_received ON sessions (request_received)`,
	`CREATE INDEX sessions_namespace ON sessions (namespace, request_received)`,
	`CREATE INDEX sessions_pod ON sessions (pod, request_received)`,
	`CREATE INDEX sessions_container ON sessions (container, request_received)`,
	`CREATE INDEX sessions_end ON sessions (coalesce(end_time, request_received))`,

	// One row per (session, username) and per (session, group), the
	// authenticated and the impersonated user's alike, with the session's
	// time and id copied, so that a user or group filter walks
	// (name, time, id) in the sessions' order; and its audit ID, so that
	// a process filter by user or group reads the user's sessions' IDs
	// here, in order, not from one sessions page each.
	`CREATE TABLE session_users (
		username         TEXT NOT NULL,
		request_received INTEGER NOT NULL,
		session_id       INTEGER NOT NULL,` + sideAuditIDColumn + `
		PRIMARY KEY (username, request_received, session_id)
	) WITHOUT ROWID`,
	`CREATE INDEX session_users_session ON session_users (session_id)`,
	`CREATE TABLE session_groups (
		grp              TEXT NOT NULL,
		request_received INTEGER NOT NULL,
		session_id       INTEGER NOT NULL,` + sideAuditIDColumn + `
		PRIMARY KEY (grp, request_received, session_id)
	) WITHOUT ROWID`,
	`CREATE INDEX session_groups_session ON session_groups (session_id)`,
}, processesTable, runTables, runCommandTables, runCommandsBound[:1], []string{
	commandsTable,
	commandsLineIndex,
	commandsSpanIndex,

	auditRecordsTable("audit_records"),
	`CREATE INDEX audit_records_time ON audit_records (stage_timestamp)`,

	`CREATE TABLE alerts (
		seq        INTEGER PRIMARY KEY,
		id         TEXT NOT NULL UNIQUE,
		time       INTEGER NOT NULL,
		rule       TEXT NOT NULL DEFAULT '',
		severity   TEXT NOT NULL DEFAULT '',
		message    TEXT NOT NULL DEFAULT '',
		audit_id   TEXT NOT NULL DEFAULT '',
		process_id TEXT NOT NULL DEFAULT '',
		payload    TEXT` + alertStatusColumns + `
	)`,
	`CREATE INDEX alerts_time ON alerts (time)`,
	`CREATE INDEX alerts_rule ON alerts (rule, time)`,
	alertsProcessIndex,
	`CREATE INDEX alerts_audit ON alerts (audit_id, time)`,
})

// auditRecordsTable is the audit_records DDL under name. request_key is
// AuditRecord.RequestKey: a redelivered stage replaces its row, while a
// different request that reuses the audit ID is kept beside it.
func auditRecordsTable(name string) string {
	return `CREATE TABLE ` + name + ` (
		audit_id        TEXT NOT NULL,
		stage           TEXT NOT NULL,
		request_key     TEXT NOT NULL,
		stage_timestamp INTEGER NOT NULL,
		event           TEXT NOT NULL,
		PRIMARY KEY (audit_id, stage, request_key)
	) WITHOUT ROWID`
}

// commandsLineIndex holds what a command search reads of each line
// (matchCommandsSQL), its span and (as every index) its id: the search
// walks it instead of the table's rows, which hold the argv's JSON too,
// half the pages to fault in again after each commit (version 12). IF NOT
// EXISTS: the upgrade tests make their older files from this schema,
// index and all.
const commandsLineIndex = `CREATE INDEX IF NOT EXISTS commands_line ON commands (line, first_start, last_start)`

// commandsSpanIndex answers a remembered command search's spans by id
// (version 14, commandsearch.go).
const commandsSpanIndex = `CREATE INDEX commands_span ON commands (id, first_start, last_start)`

// processRunsAuditIndex finds a session's runs, newest first, and holds
// their bounds and counts, so that a session listing's aggregates
// (sessionCols) read the index alone (version 13). A run's row carries its
// body, some 16 KB in the soak, so a page holds a few rows at most and
// reading fifty sessions' runs faulted in as many table pages again after
// every commit: a pod's newest 50 sessions after a commit, on a copy of a
// make soak store, took 1.15 ms against 0.88 with the index (docs/benchmarks.md).
const processRunsAuditIndex = `CREATE INDEX process_runs_audit ON process_runs (audit_id, last_start, first_start, n)`

// commandsTable holds each distinct argv once (version 7): a process row
// stores its id (0: no argv), so a row binds one integer, not the argv's
// JSON and its line, and a command substring search reads the distinct
// lines instead of every process. [first_start, last_start] spans the
// start of every process with that argv and the receipt of every session
// that asked for it: the search walks only that part of processes_start
// or sessions_received.
const commandsTable = `CREATE TABLE commands (
		id          INTEGER PRIMARY KEY,
		argv        TEXT NOT NULL UNIQUE,
		line        TEXT NOT NULL,
		first_start INTEGER NOT NULL,
		last_start  INTEGER NOT NULL
	)`

// processesTable is the processes table and its indexes (version 8). The
// columns a query filters, sorts or updates on, and the two an attacker
// names (filename, the SPO UID: kept as their exact bytes), are columns;
// the rest of join.Process is detail, one JSON object under the process's
// API names (processDetailJSON): binding a parameter costs a row about as
// much as a B-tree insert, and detail replaced twelve of them.
var processesTable = []string{
	`CREATE TABLE processes (
		id                INTEGER PRIMARY KEY,
		process_id        TEXT NOT NULL UNIQUE,
		command_id        INTEGER NOT NULL DEFAULT 0,
		filename          TEXT NOT NULL DEFAULT '',
		namespace         TEXT NOT NULL DEFAULT '',
		pod               TEXT NOT NULL DEFAULT '',
		container         TEXT NOT NULL DEFAULT '',
		start             INTEGER NOT NULL,
		exec_time         INTEGER NOT NULL DEFAULT 0,
		exit_time         INTEGER,
		exit_code         INTEGER,
		audit_id          TEXT NOT NULL DEFAULT '',
		claimed_audit_id  TEXT NOT NULL DEFAULT '',
		spo_request_uid   TEXT NOT NULL DEFAULT '',
		attribution       TEXT NOT NULL DEFAULT '',
		detail            TEXT
	)`,
	`CREATE INDEX processes_start ON processes (start)`,
	`CREATE INDEX processes_audit ON processes (audit_id, start)`,
	`CREATE INDEX processes_claimed ON processes (claimed_audit_id, start) WHERE claimed_audit_id != ''`,
	`CREATE INDEX processes_namespace ON processes (namespace, start)`,
	`CREATE INDEX processes_pod ON processes (pod, start)`,
	`CREATE INDEX processes_container ON processes (container, start)`,
	processesAttributionIndex,
}

// processesAttributionIndex leaves out inherited processes, most rows by
// far: a filter on another attribution (a root, a tampered or ambiguous
// process) names the index's condition to walk it (processesListing); one
// on inherited walks processes_start, where nearly every row matches.
const processesAttributionIndex = `CREATE INDEX processes_attribution ON processes (attribution, start)
	WHERE attribution != '` + string(vocab.AttributionInherited) + `'`

// alertStatusColumns hold an alert's resolution (version 10): status is
// "" as raised and store.AlertResolved once resolved; resolved_at is NULL
// until then.
const alertStatusColumns = `,
		status      TEXT NOT NULL DEFAULT '',
		resolved_at INTEGER,
		resolution  TEXT NOT NULL DEFAULT ''`

// alertsProcessIndex finds the alerts raised on a process (version 10):
// the agent reads them when a late record may resolve them.
const alertsProcessIndex = `CREATE INDEX alerts_process ON alerts (process_id, time)`

// sideAuditIDColumn is the side tables' copy of the session's audit ID
// (version 6).
const sideAuditIDColumn = `
		audit_id         TEXT NOT NULL DEFAULT '',`

// migration upgrades a file by one version inside migrate's transaction.
type migration func(ctx context.Context, tx *sql.Tx) error

// migrations[v] upgrades a version-v file to v+1.
var migrations = map[int]migration{
	1: statements(
		`ALTER TABLE sessions ADD COLUMN env TEXT`,
		`ALTER TABLE sessions ADD COLUMN stdin INTEGER NOT NULL DEFAULT 0`,
		`ALTER TABLE sessions ADD COLUMN tty INTEGER NOT NULL DEFAULT 0`,
		`CREATE INDEX processes_claimed ON processes (claimed_audit_id, start) WHERE claimed_audit_id != ''`,
	),
	2: keyAuditRecordsByRequest,
	// Version 4 stores what join.Session and join.Process hold beyond the
	// old store records: the request's ports, URI, annotations, SPO UID
	// and conflicting requests; the process's exec time, argv truncation
	// and SPO UID.
	3: statements(
		`ALTER TABLE sessions ADD COLUMN ports TEXT`,
		`ALTER TABLE sessions ADD COLUMN request_uri TEXT NOT NULL DEFAULT ''`,
		`ALTER TABLE sessions ADD COLUMN annotations TEXT`,
		`ALTER TABLE sessions ADD COLUMN spo_request_uid TEXT NOT NULL DEFAULT ''`,
		`ALTER TABLE sessions ADD COLUMN conflicts TEXT`,
		`ALTER TABLE processes ADD COLUMN exec_time INTEGER NOT NULL DEFAULT 0`,
		`ALTER TABLE processes ADD COLUMN argv_truncated INTEGER NOT NULL DEFAULT 0`,
		`ALTER TABLE processes ADD COLUMN spo_request_uid TEXT NOT NULL DEFAULT ''`,
	),
	// Version 5 writes two B-trees fewer for most process rows: retention
	// walks processes_start instead of an exit index, and the attribution
	// index leaves inherited processes out.
	4: statements(
		`DROP INDEX processes_exit`,
		`DROP INDEX processes_attribution`,
		processesAttributionIndex,
	),
	// Version 6 copies the session's audit ID into its user and group
	// rows: a process filter by user no longer reads a sessions page per
	// session of the user.
	5: statements(
		`ALTER TABLE session_users ADD COLUMN audit_id TEXT NOT NULL DEFAULT ''`,
		`ALTER TABLE session_groups ADD COLUMN audit_id TEXT NOT NULL DEFAULT ''`,
		`UPDATE session_users SET audit_id = (SELECT s.audit_id FROM sessions s WHERE s.id = session_id)`,
		`UPDATE session_groups SET audit_id = (SELECT s.audit_id FROM sessions s WHERE s.id = session_id)`,
	),
	// Version 7 keeps each distinct argv once, in commands.
	6: statements(
		commandsTable,
		`INSERT INTO commands (argv, line, first_start, last_start)
			SELECT argv, max(argv_line), min(start), max(start) FROM processes
			WHERE argv IS NOT NULL GROUP BY argv`,
		`INSERT INTO commands (argv, line, first_start, last_start)
			SELECT command, max(command_line), min(request_received), max(request_received) FROM sessions
			WHERE command IS NOT NULL GROUP BY command
			ON CONFLICT (argv) DO UPDATE SET first_start = min(first_start, excluded.first_start),
				last_start = max(last_start, excluded.last_start)`,
		`ALTER TABLE processes ADD COLUMN command_id INTEGER NOT NULL DEFAULT 0`,
		`UPDATE processes SET command_id = (SELECT c.id FROM commands c WHERE c.argv = processes.argv)
			WHERE argv IS NOT NULL`,
		`ALTER TABLE processes DROP COLUMN argv`,
		`ALTER TABLE processes DROP COLUMN argv_line`,
	),
	// Version 8 keeps the process fields no query reads alone in one JSON
	// column, detail (processesTable). The table is rebuilt, not altered:
	// each DROP COLUMN rewrites it. Row ids are kept, so a page's cursor
	// stays good.
	7: statements(slices.Concat([]string{
		strings.Replace(processesTable[0], "CREATE TABLE processes (", "CREATE TABLE processes_v8 (", 1),
		`INSERT INTO processes_v8 (id, process_id, command_id, filename, namespace, pod, container, start,
			exec_time, exit_time, exit_code, audit_id, claimed_audit_id, spo_request_uid, attribution, detail)
		SELECT id, process_id, command_id, filename, namespace, pod, container, start,
			exec_time, exit_time, exit_code, audit_id, claimed_audit_id, spo_request_uid, attribution,
			json_object('parentProcessID', parent_process_id, 'pid', pid, 'ppid', ppid, 'uid', uid,
				'argvTruncated', json(iif(argv_truncated, 'true', 'false')), 'containerID', container_id,
				'podUID', pod_uid, 'sessionRootID', session_root_id, 'source', source,
				'confidence', confidence, 'candidates', json(candidates), 'flags', json(flags))
		FROM processes`,
		`DROP TABLE processes`,
		`ALTER TABLE processes_v8 RENAME TO processes`,
	}, processesTable[1:])...),
	// Version 9 stores a transaction's settled processes of one session
	// in one run (runs.go). The rows written before stay rows.
	8: statements(runTables...),
	// Version 10 keeps an alert's resolution on its row
	// (alertStatusColumns): the stored alerts stay as raised.
	9: statements(
		`ALTER TABLE alerts ADD COLUMN status TEXT NOT NULL DEFAULT ''`,
		`ALTER TABLE alerts ADD COLUMN resolved_at INTEGER`,
		`ALTER TABLE alerts ADD COLUMN resolution TEXT NOT NULL DEFAULT ''`,
		alertsProcessIndex,
	),
	// Version 11 lists each run's commands (runCommandTables), read from
	// the lines of the runs stored before.
	10: statements(append(slices.Clone(runCommandTables),
		`INSERT OR IGNORE INTO process_run_commands (command_id, run)
			SELECT DISTINCT j.value ->> '$.commandID', r.id FROM process_runs r, json_each(r.body) j
			WHERE j.value ->> '$.commandID' != 0`)...),
	// Version 12 indexes the command lines for the search.
	11: statements(commandsLineIndex),
	// Version 13 answers a session's run aggregates from its index.
	12: statements(`DROP INDEX IF EXISTS process_runs_audit`, processRunsAuditIndex),
	// Version 14 keeps each run's last start with its commands, and
	// indexes the commands' spans by id.
	13: statements(append(slices.Clone(runCommandsBound), commandsSpanIndex)...),
}

func statements(stmts ...string) migration {
	return func(ctx context.Context, tx *sql.Tx) error {
		for _, stmt := range stmts {
			if _, err := tx.ExecContext(ctx, stmt); err != nil {
				return err
			}
		}
		return nil
	}
}

// keyAuditRecordsByRequest rebuilds audit_records, keyed by (audit_id,
// stage) until version 2, with request_key in its primary key, computing
// each stored record's key.
func keyAuditRecordsByRequest(ctx context.Context, tx *sql.Tx) error {
	if _, err := tx.ExecContext(ctx, auditRecordsTable("audit_records_v3")); err != nil {
		return fmt.Errorf("creating keyed audit records table: %w", err)
	}
	ins, err := tx.PrepareContext(ctx, `INSERT INTO audit_records_v3
		(audit_id, stage, request_key, stage_timestamp, event) VALUES (?,?,?,?,?)`)
	if err != nil {
		return fmt.Errorf("preparing keyed audit record insert: %w", err)
	}
	defer ins.Close()
	rows, err := tx.QueryContext(ctx, `SELECT audit_id, stage, stage_timestamp, event FROM audit_records`)
	if err != nil {
		return fmt.Errorf("querying audit records to key: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var r store.AuditRecord
		var ts int64
		var ev string
		if err := rows.Scan(&r.AuditID, &r.Stage, &ts, &ev); err != nil {
			return fmt.Errorf("reading audit record to key: %w", err)
		}
		r.Event = []byte(ev)
		if _, err := ins.ExecContext(ctx, r.AuditID, r.Stage, r.RequestKey(), ts, ev); err != nil {
			return fmt.Errorf("copying audit record %s/%s: %w", r.AuditID, r.Stage, err)
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("reading audit records to key: %w", err)
	}
	rows.Close()
	return statements(
		`DROP TABLE audit_records`,
		`ALTER TABLE audit_records_v3 RENAME TO audit_records`,
		`CREATE INDEX audit_records_time ON audit_records (stage_timestamp)`,
	)(ctx, tx)
}
