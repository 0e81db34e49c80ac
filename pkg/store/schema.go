package store

// schemaVersion is stored in PRAGMA user_version. Bump it with a migration
// step in migrate when the schema changes.
const schemaVersion = 2

// Times are INTEGER nanoseconds since the Unix epoch (NULL where the Go
// field is a nil pointer); lists and maps are JSON text, NULL when empty.
// Every list and keyset ordering is (time DESC, id DESC), where id is the
// table's INTEGER PRIMARY KEY (its rowid, which every secondary index ends
// in), so a filtered page walks one (column, time) index in order and
// stops at LIMIT. The id is declared, so VACUUM keeps it.
var schemaV1 = []string{
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
		tty              INTEGER NOT NULL DEFAULT 0
	)`,
	`CREATE INDEX sessions_received ON sessions (request_received)`,
	`CREATE INDEX sessions_namespace ON sessions (namespace, request_received)`,
	`CREATE INDEX sessions_pod ON sessions (pod, request_received)`,
	`CREATE INDEX sessions_container ON sessions (container, request_received)`,
	`CREATE INDEX sessions_end ON sessions (coalesce(end_time, request_received))`,

	// One row per (session, username) and per (session, group), the
	// authenticated and the impersonated user's alike, with the session's
	// time and id copied, so that a user or group filter walks
	// (name, time, id) in the sessions' order.
	`CREATE TABLE session_users (
		username         TEXT NOT NULL,
		request_received INTEGER NOT NULL,
		session_id       INTEGER NOT NULL,
		PRIMARY KEY (username, request_received, session_id)
	) WITHOUT ROWID`,
	`CREATE INDEX session_users_session ON session_users (session_id)`,
	`CREATE TABLE session_groups (
		grp              TEXT NOT NULL,
		request_received INTEGER NOT NULL,
		session_id       INTEGER NOT NULL,
		PRIMARY KEY (grp, request_received, session_id)
	) WITHOUT ROWID`,
	`CREATE INDEX session_groups_session ON session_groups (session_id)`,

	`CREATE TABLE processes (
		id                INTEGER PRIMARY KEY,
		process_id        TEXT NOT NULL UNIQUE,
		parent_process_id TEXT NOT NULL DEFAULT '',
		pid               INTEGER NOT NULL DEFAULT 0,
		ppid              INTEGER NOT NULL DEFAULT 0,
		uid               INTEGER NOT NULL DEFAULT 0,
		filename          TEXT NOT NULL DEFAULT '',
		argv              TEXT,
		argv_line         TEXT NOT NULL DEFAULT '',
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
		session_root_id   TEXT NOT NULL DEFAULT ''
	)`,
	`CREATE INDEX processes_start ON processes (start)`,
	`CREATE INDEX processes_audit ON processes (audit_id, start)`,
	`CREATE INDEX processes_claimed ON processes (claimed_audit_id, start) WHERE claimed_audit_id != ''`,
	`CREATE INDEX processes_namespace ON processes (namespace, start)`,
	`CREATE INDEX processes_pod ON processes (pod, start)`,
	`CREATE INDEX processes_container ON processes (container, start)`,
	`CREATE INDEX processes_attribution ON processes (attribution, start)`,
	`CREATE INDEX processes_exit ON processes (exit_time) WHERE exit_time IS NOT NULL`,

	`CREATE TABLE audit_records (
		audit_id        TEXT NOT NULL,
		stage           TEXT NOT NULL,
		stage_timestamp INTEGER NOT NULL,
		event           TEXT NOT NULL,
		PRIMARY KEY (audit_id, stage)
	) WITHOUT ROWID`,
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
		payload    TEXT
	)`,
	`CREATE INDEX alerts_time ON alerts (time)`,
	`CREATE INDEX alerts_rule ON alerts (rule, time)`,
	`CREATE INDEX alerts_audit ON alerts (audit_id, time)`,
}

// migrations[v] upgrades a version-v file to v+1.
var migrations = map[int][]string{
	1: {
		`ALTER TABLE sessions ADD COLUMN env TEXT`,
		`ALTER TABLE sessions ADD COLUMN stdin INTEGER NOT NULL DEFAULT 0`,
		`ALTER TABLE sessions ADD COLUMN tty INTEGER NOT NULL DEFAULT 0`,
		`CREATE INDEX processes_claimed ON processes (claimed_audit_id, start) WHERE claimed_audit_id != ''`,
	},
}
