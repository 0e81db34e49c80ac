package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	modsqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/store"
)

const upsertSessionSQL = `INSERT INTO sessions (
	audit_id, username, uid, groups, extra, impersonated, source_ips, user_agent,
	namespace, pod, container, command, command_line, verb, subresource, code, decision, reason,
	request_received, end_time, stages, flags, updated_at, env, stdin, tty,
	ports, request_uri, annotations, spo_request_uid, conflicts
) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)
ON CONFLICT (audit_id) DO UPDATE SET
	username = excluded.username, uid = excluded.uid, groups = excluded.groups, extra = excluded.extra,
	impersonated = excluded.impersonated,
	source_ips = excluded.source_ips, user_agent = excluded.user_agent,
	namespace = excluded.namespace, pod = excluded.pod, container = excluded.container,
	command = excluded.command, command_line = excluded.command_line, verb = excluded.verb,
	subresource = excluded.subresource, code = excluded.code, decision = excluded.decision,
	reason = excluded.reason, request_received = excluded.request_received,
	end_time = excluded.end_time, stages = excluded.stages, flags = excluded.flags,
	updated_at = excluded.updated_at, env = excluded.env, stdin = excluded.stdin, tty = excluded.tty,
	ports = excluded.ports, request_uri = excluded.request_uri, annotations = excluded.annotations,
	spo_request_uid = excluded.spo_request_uid, conflicts = excluded.conflicts
RETURNING id`

// The process upsert is multi-row: processRowsPerStmt rows per statement
// cut the per-statement cost that dominates a batch.
const (
	processRowsPerStmt = 32
	processColumns     = 15
	upsertProcessHead  = `INSERT INTO processes (
	process_id, command_id, filename, namespace, pod, container, start, exec_time, exit_time, exit_code,
	audit_id, claimed_audit_id, spo_request_uid, attribution, detail
) VALUES `
	upsertProcessTail = `
ON CONFLICT (process_id) DO UPDATE SET
	command_id = excluded.command_id, filename = excluded.filename, namespace = excluded.namespace,
	pod = excluded.pod, container = excluded.container, start = excluded.start,
	exec_time = excluded.exec_time, exit_time = excluded.exit_time, exit_code = excluded.exit_code,
	audit_id = excluded.audit_id, claimed_audit_id = excluded.claimed_audit_id,
	spo_request_uid = excluded.spo_request_uid, attribution = excluded.attribution, detail = excluded.detail`
)

// upsertProcessSQLs[n] is the process upsert of n rows, 1 to
// processRowsPerStmt, and insertProcessSQLs[n] the plain insert; each is
// prepared once, when first used.
var upsertProcessSQLs, insertProcessSQLs = func() (up, ins [processRowsPerStmt + 1]string) {
	for n := 1; n <= processRowsPerStmt; n++ {
		up[n] = processValuesSQL(upsertProcessHead, n) + upsertProcessTail
		// OR FAIL: no constraint aborts the statement, so SQLite keeps no
		// statement journal (a copy of every page the statement changes,
		// up to a third of a multi-row upsert's cost).
		ins[n] = processValuesSQL("INSERT OR FAIL"+strings.TrimPrefix(upsertProcessHead, "INSERT"), n)
	}
	return up, ins
}()

// processValuesSQL is head followed by n rows of values.
func processValuesSQL(head string, n int) string {
	row := "(" + strings.Repeat("?,", processColumns-1) + "?)"
	return head + strings.Repeat(row+",", n-1) + row
}

// updateExitSQL writes an exit alone (store.Batch.Exits): it rewrites
// the row and no index (none holds the exit columns), where a whole row
// rewrites every index entry.
const updateExitSQL = `UPDATE processes SET exit_time = ?, exit_code = ? WHERE process_id = ?`

const upsertAuditRecordSQL = `INSERT INTO audit_records (audit_id, stage, request_key, stage_timestamp, event)
VALUES (?,?,?,?,?) ON CONFLICT (audit_id, stage, request_key) DO UPDATE SET
	stage_timestamp = excluded.stage_timestamp, event = excluded.event`

// upsertAlertSQL inserts an alert once by ID. A resolution
// (store.AlertResolved) of a stored alert sets its status columns alone,
// keeping what the alert said; one of an alert not stored (retention
// dropped it, or it was raised elsewhere) is stored as given. An alert as
// raised never touches a stored row, so its redelivery after the
// resolution does not undo it.
const upsertAlertSQL = `INSERT INTO alerts (id, time, rule, severity, message, audit_id, process_id, payload,
	status, resolved_at, resolution)
VALUES (?,?,?,?,?,?,?,?,?,?,?) ON CONFLICT (id) DO UPDATE SET
	status = excluded.status, resolved_at = excluded.resolved_at, resolution = excluded.resolution
WHERE excluded.status = '` + store.AlertResolved + `'`

// Upsert writes sessions and processes in one transaction. A row whose key
// is stored already is replaced whole.
func (s *Store) Upsert(ctx context.Context, sessions []join.Session, processes []join.Process) error {
	return s.Write(ctx, store.Batch{Sessions: sessions, Processes: processes})
}

// InsertAlerts stores alerts; an alert whose ID is stored already is
// skipped, and a resolution resolves it (upsertAlertSQL).
func (s *Store) InsertAlerts(ctx context.Context, alerts []store.Alert) error {
	return s.Write(ctx, store.Batch{Alerts: alerts})
}

// Write commits a batch in one transaction: all of it or none of it.
// Sessions and processes are upserted (replaced whole), audit records are
// upserted by (auditID, stage, RequestKey) so that a different request
// reusing an audit ID is kept beside the first, and alerts are inserted
// once by ID, a resolution updating the stored alert's status.
func (s *Store) Write(ctx context.Context, b store.Batch) error {
	if b.Len() == 0 {
		return nil
	}
	if err := s.stmts.ensure(ctx, s.w, s.batchQueries(b)...); err != nil {
		return err
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("beginning write transaction: %w", err)
	}
	defer tx.Rollback()
	ts := &txStmts{ctx: ctx, s: s, tx: tx}
	defer ts.close()
	cmds := newTxCommands(ts, &s.commands)
	if err := writeSessions(ctx, ts, cmds, b.Sessions); err != nil {
		return err
	}
	if err := s.writeProcesses(ctx, ts, cmds, b.Processes); err != nil {
		return err
	}
	if err := s.writeExits(ctx, ts, cmds, b.Exits); err != nil {
		return err
	}
	if err := cmds.flush(ctx); err != nil {
		return err
	}
	if err := writeAuditRecords(ctx, ts, b.AuditRecords); err != nil {
		return err
	}
	if err := writeAlerts(ctx, ts, b.Alerts); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("committing write transaction of %d rows: %w", b.Len(), err)
	}
	cmds.committed()
	return nil
}

func writeSessions(ctx context.Context, ts *txStmts, cmds *txCommands, sessions []join.Session) error {
	if len(sessions) == 0 {
		return nil
	}
	up, err := ts.get(upsertSessionSQL)
	if err != nil {
		return fmt.Errorf("preparing session upsert: %w", err)
	}
	idx, err := prepareSideTables(ts)
	if err != nil {
		return err
	}
	now := time.Now()
	for i := range sessions {
		ss := &sessions[i]
		args, err := sessionArgs(ss, now)
		if err != nil {
			return fmt.Errorf("encoding session %s: %w", ss.AuditID, err)
		}
		var id int64
		if err := up.QueryRowContext(ctx, args...).Scan(&id); err != nil {
			return fmt.Errorf("upserting session %s: %w", ss.AuditID, err)
		}
		if err := idx.refresh(ctx, id, ss); err != nil {
			return fmt.Errorf("indexing session %s: %w", ss.AuditID, err)
		}
		// The command's span covers the request, so that a command
		// substring finds the session (the row keeps its own copy).
		if _, err := cmds.ids(ctx, 1, func(int) ([]string, int64) {
			return ss.Command, nanos(ss.RequestReceivedTimestamp)
		}, nil); err != nil {
			return fmt.Errorf("storing the command of session %s: %w", ss.AuditID, err)
		}
	}
	return nil
}

var sideTableSQL = [4]string{
	`DELETE FROM session_users WHERE session_id = ?`,
	`DELETE FROM session_groups WHERE session_id = ?`,
	`INSERT OR IGNORE INTO session_users (username, request_received, session_id, audit_id) VALUES (?,?,?,?)`,
	`INSERT OR IGNORE INTO session_groups (grp, request_received, session_id, audit_id) VALUES (?,?,?,?)`,
}

// sideTables are the statements that keep session_users and
// session_groups in step with a session row.
type sideTables struct {
	stmts [4]*sql.Stmt // delete users, delete groups, add user, add group
}

func prepareSideTables(ts *txStmts) (*sideTables, error) {
	var st sideTables
	for i, q := range sideTableSQL {
		stmt, err := ts.get(q)
		if err != nil {
			return nil, fmt.Errorf("preparing session index statement: %w", err)
		}
		st.stmts[i] = stmt
	}
	return &st, nil
}

// refresh replaces the session's user and group rows.
func (st *sideTables) refresh(ctx context.Context, id int64, ss *join.Session) error {
	users, groups := []string{ss.User.Username}, ss.User.Groups
	if imp := ss.ImpersonatedUser; imp != nil {
		users = append(users, imp.Username)
		groups = append(groups[:len(groups):len(groups)], imp.Groups...)
	}
	for _, del := range st.stmts[:2] {
		if _, err := del.ExecContext(ctx, id); err != nil {
			return fmt.Errorf("clearing users and groups: %w", err)
		}
	}
	rr := nanos(ss.RequestReceivedTimestamp)
	for _, u := range users {
		if u == "" {
			continue
		}
		if _, err := st.stmts[2].ExecContext(ctx, u, rr, id, ss.AuditID); err != nil {
			return fmt.Errorf("adding user %q: %w", u, err)
		}
	}
	for _, g := range groups {
		if _, err := st.stmts[3].ExecContext(ctx, g, rr, id, ss.AuditID); err != nil {
			return fmt.Errorf("adding group %q: %w", g, err)
		}
	}
	return nil
}

func sessionArgs(ss *join.Session, now time.Time) ([]any, error) {
	if ss.AuditID == "" {
		return nil, fmt.Errorf("checking session: empty audit ID")
	}
	updated := ss.UpdatedAt
	if updated.IsZero() {
		updated = now
	}
	var e encoder
	u := &ss.User
	args := []any{
		ss.AuditID, u.Username, u.UID, e.json(u.Groups), e.json(u.Extra), e.json(ss.ImpersonatedUser),
		e.json(ss.SourceIPs), ss.UserAgent, ss.Namespace, ss.Pod, ss.Container, e.json(ss.Command),
		strings.Join(ss.Command, " "), ss.Verb, ss.Subresource, ss.Code, ss.Decision, ss.Reason,
		nanos(ss.RequestReceivedTimestamp), nullNanos(ss.EndTimestamp), e.json(ss.Stages), e.json(ss.Flags),
		nanos(updated), e.json(ss.Env), triInt(ss.Stdin), triInt(ss.TTY),
		e.json(ss.Ports), ss.RequestURI, e.json(ss.Annotations), ss.SPOExecRequestUID, e.json(ss.Conflicts),
	}
	return args, e.err
}

// writeProcessRows upserts procs as processes rows.
func writeProcessRows(ctx context.Context, ts *txStmts, cmds *txCommands, procs []join.Process) error {
	if len(procs) == 0 {
		return nil
	}
	var pa processArgs
	var ids []int64
	insert := true
	for lo := 0; lo < len(procs); lo += processRowsPerStmt {
		chunk := procs[lo:min(lo+processRowsPerStmt, len(procs))]
		var err error
		if ids, err = cmds.ids(ctx, len(chunk), processArgvs(chunk), ids); err != nil {
			return err
		}
		pa.args = pa.args[:0]
		for i := range chunk {
			if err = pa.add(&chunk[i], ids[i]); err != nil {
				return fmt.Errorf("encoding process %s: %w", chunk[i].ProcessID, err)
			}
		}
		args := pa.args
		if insert {
			// Most rows are new (a process's first row): insert them, and
			// upsert from the first chunk holding a stored one on. A
			// failed insert keeps the rows before the conflict, which the
			// upsert then rewrites.
			ins, err := ts.get(insertProcessSQLs[len(chunk)])
			if err != nil {
				return fmt.Errorf("preparing process insert: %w", err)
			}
			_, err = ins.ExecContext(ctx, args...)
			if err == nil {
				continue
			}
			if !isConstraint(err) {
				return fmt.Errorf("inserting processes %s..%s: %w", chunk[0].ProcessID, chunk[len(chunk)-1].ProcessID, err)
			}
			insert = false
		}
		up, err := ts.get(upsertProcessSQLs[len(chunk)])
		if err != nil {
			return fmt.Errorf("preparing process upsert: %w", err)
		}
		if _, err := up.ExecContext(ctx, args...); err != nil {
			return fmt.Errorf("upserting processes %s..%s: %w", chunk[0].ProcessID, chunk[len(chunk)-1].ProcessID, err)
		}
	}
	return nil
}

// isConstraint reports whether err is SQLite's constraint violation (an
// insert meeting a stored process ID).
func isConstraint(err error) bool {
	var se *modsqlite.Error
	return errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_CONSTRAINT
}

// writeExits writes each process's exit alone onto its stored row, and
// the whole row of a process the store lacks (never written, or deleted by
// retention since).
func (s *Store) writeExits(ctx context.Context, ts *txStmts, cmds *txCommands, exits []join.Process) error {
	if len(exits) == 0 {
		return nil
	}
	up, err := ts.get(updateExitSQL)
	if err != nil {
		return fmt.Errorf("preparing exit update: %w", err)
	}
	var missing []join.Process
	for i := range exits {
		p := &exits[i]
		var code any
		if p.ExitCode != nil {
			code = int64(*p.ExitCode)
		}
		res, err := up.ExecContext(ctx, nullNanos(p.Exit), code, p.ProcessID)
		if err != nil {
			return fmt.Errorf("updating the exit of process %s: %w", p.ProcessID, err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return fmt.Errorf("updating the exit of process %s: %w", p.ProcessID, err)
		} else if n == 0 {
			missing = append(missing, *p)
		}
	}
	return s.writeProcesses(ctx, ts, cmds, missing)
}

func writeAuditRecords(ctx context.Context, ts *txStmts, recs []store.AuditRecord) error {
	if len(recs) == 0 {
		return nil
	}
	up, err := ts.get(upsertAuditRecordSQL)
	if err != nil {
		return fmt.Errorf("preparing audit record upsert: %w", err)
	}
	for _, r := range recs {
		if r.AuditID == "" || r.Stage == "" {
			return fmt.Errorf("checking audit record: empty audit ID or stage")
		}
		ev := string(r.Event)
		if ev == "" {
			ev = "null"
		}
		if _, err := up.ExecContext(ctx, r.AuditID, r.Stage, r.RequestKey(), nanos(r.StageTimestamp), ev); err != nil {
			return fmt.Errorf("upserting audit record %s/%s: %w", r.AuditID, r.Stage, err)
		}
	}
	return nil
}

func writeAlerts(ctx context.Context, ts *txStmts, alerts []store.Alert) error {
	if len(alerts) == 0 {
		return nil
	}
	up, err := ts.get(upsertAlertSQL)
	if err != nil {
		return fmt.Errorf("preparing alert upsert: %w", err)
	}
	for _, a := range alerts {
		if a.ID == "" {
			return fmt.Errorf("checking alert: empty ID")
		}
		var payload any
		if len(a.Payload) > 0 {
			payload = string(a.Payload)
		}
		if _, err := up.ExecContext(ctx, a.ID, nanos(a.Time), a.Rule, a.Severity, a.Message,
			a.AuditID, a.ProcessID, payload, a.Status, nullNanos(a.ResolvedAt), a.Resolution); err != nil {
			return fmt.Errorf("upserting alert %s: %w", a.ID, err)
		}
	}
	return nil
}
