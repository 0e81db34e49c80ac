package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// sessionCols selects a session row and its process aggregates, which the
// processes_audit index answers without touching the process rows.
const sessionCols = `s.id, s.audit_id, s.username, s.uid, s.groups, s.extra, s.impersonated,
	s.source_ips, s.user_agent, s.namespace, s.pod, s.container, s.command, s.verb, s.subresource,
	s.code, s.decision, s.reason, s.request_received, s.end_time, s.stages, s.flags, s.updated_at,
	s.env, s.stdin, s.tty,
	(SELECT count(*) FROM processes p WHERE p.audit_id = s.audit_id),
	(SELECT min(p.start) FROM processes p WHERE p.audit_id = s.audit_id),
	(SELECT max(p.start) FROM processes p WHERE p.audit_id = s.audit_id)`

// ListSessions returns one page of sessions matching f, newest
// RequestReceived first, and the cursor of the next page ("" after the
// last). Pages are keyset-paginated on (RequestReceived, row id): rows
// inserted while a client pages never shift the rows it has yet to see.
func (s *Store) ListSessions(ctx context.Context, f SessionFilter) ([]Session, string, error) {
	q, args, limit, err := s.sessionsQuery(f)
	if err != nil {
		return nil, "", err
	}
	rows, err := s.r.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, "", fmt.Errorf("querying sessions: %w", err)
	}
	defer rows.Close()
	var out []Session
	var ids []int64
	for rows.Next() {
		ss, id, err := scanSession(rows)
		if err != nil {
			return nil, "", err
		}
		out = append(out, ss)
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		return nil, "", fmt.Errorf("reading sessions: %w", err)
	}
	next := ""
	if len(out) > limit {
		out = out[:limit]
		next = cursor{t: nanos(out[limit-1].RequestReceived), id: ids[limit-1]}.String()
	}
	return out, next, nil
}

// sessionsQuery builds ListSessions' query, which fetches limit+1 rows to
// tell whether a next page exists.
func (s *Store) sessionsQuery(f SessionFilter) (string, []any, int, error) {
	cur, hasCur, err := parseCursor(f.Cursor)
	if err != nil {
		return "", nil, 0, err
	}
	limit := s.limit(f.Limit)
	var w where
	from, timeCol, idCol := "sessions s", "s.request_received", "s.id"
	// A user or group filter walks its side table's (name, time, id) key in
	// order and joins each row; with both, the user's rows drive and the
	// group is a key lookup.
	switch {
	case f.User != "":
		from = "session_users u JOIN sessions s ON s.id = u.session_id"
		timeCol, idCol = "u.request_received", "u.session_id"
		w.add("u.username = ?", f.User)
		if f.Group != "" {
			w.add(`EXISTS (SELECT 1 FROM session_groups g WHERE g.grp = ?
				AND g.request_received = u.request_received AND g.session_id = u.session_id)`, f.Group)
		}
	case f.Group != "":
		from = "session_groups g JOIN sessions s ON s.id = g.session_id"
		timeCol, idCol = "g.request_received", "g.session_id"
		w.add("g.grp = ?", f.Group)
	}
	w.eq("s.namespace", f.Namespace)
	w.eq("s.pod", f.Pod)
	w.eq("s.container", f.Container)
	if f.Command != "" {
		w.add("instr(s.command_line, ?) > 0", f.Command)
	}
	w.window(timeCol, f.Since, f.Until)
	w.after(timeCol, idCol, cur, hasCur)
	q := "SELECT " + sessionCols + " FROM " + from + w.String() +
		" ORDER BY " + timeCol + " DESC, " + idCol + " DESC LIMIT ?"
	return q, append(w.args, limit+1), limit, nil
}

// GetSession returns the session with its audit record stages and its
// processes, oldest first, or ErrNotFound.
func (s *Store) GetSession(ctx context.Context, auditID string) (SessionDetail, error) {
	// One read transaction, so the session and its processes are one
	// snapshot.
	tx, err := s.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return SessionDetail{}, fmt.Errorf("beginning session read: %w", err)
	}
	defer tx.Rollback()
	row := tx.QueryRowContext(ctx, "SELECT "+sessionCols+" FROM sessions s WHERE s.audit_id = ?", auditID)
	ss, _, err := scanSession(row)
	if errors.Is(err, sql.ErrNoRows) {
		return SessionDetail{}, fmt.Errorf("reading session %s: %w", auditID, ErrNotFound)
	}
	if err != nil {
		return SessionDetail{}, err
	}
	d := SessionDetail{Session: ss}
	if d.AuditRecords, err = auditRecords(ctx, tx, auditID); err != nil {
		return SessionDetail{}, err
	}
	if d.Processes, d.ProcessesTruncated, err = s.sessionProcesses(ctx, tx, "audit_id", auditID); err != nil {
		return SessionDetail{}, err
	}
	if d.Processes == nil {
		d.Processes = []Process{}
	}
	if d.Claimants, _, err = s.sessionProcesses(ctx, tx, "claimed_audit_id", auditID); err != nil {
		return SessionDetail{}, err
	}
	return d, nil
}

// sessionProcessesSQL selects a session's processes by col. The "!= ”"
// lets SQLite use the partial processes_claimed index: a bound parameter
// alone does not prove the row matches the index's WHERE.
func sessionProcessesSQL(col string) string {
	return "SELECT " + processCols + " FROM processes p WHERE p." + col + " = ? AND p." + col +
		" != '' ORDER BY p.start, p.id LIMIT ?"
}

// sessionProcesses returns up to SessionProcessLimit processes whose col
// (audit_id or claimed_audit_id) is auditID, oldest first, and whether
// there were more.
func (s *Store) sessionProcesses(ctx context.Context, tx *sql.Tx, col, auditID string) ([]Process, bool, error) {
	rows, err := tx.QueryContext(ctx, sessionProcessesSQL(col), auditID, s.cfg.SessionProcessLimit+1)
	if err != nil {
		return nil, false, fmt.Errorf("querying processes of session %s: %w", auditID, err)
	}
	defer rows.Close()
	var out []Process
	for rows.Next() {
		p, _, err := scanProcess(rows)
		if err != nil {
			return nil, false, err
		}
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, false, fmt.Errorf("reading processes of session %s: %w", auditID, err)
	}
	if len(out) > s.cfg.SessionProcessLimit {
		return out[:s.cfg.SessionProcessLimit], true, nil
	}
	return out, false, nil
}

func auditRecords(ctx context.Context, tx *sql.Tx, auditID string) ([]AuditRecord, error) {
	rows, err := tx.QueryContext(ctx, `SELECT stage, stage_timestamp, event FROM audit_records
		WHERE audit_id = ? ORDER BY stage_timestamp, stage, request_key`, auditID)
	if err != nil {
		return nil, fmt.Errorf("querying audit records of %s: %w", auditID, err)
	}
	defer rows.Close()
	var out []AuditRecord
	for rows.Next() {
		r := AuditRecord{AuditID: auditID}
		var ts int64
		var ev string
		if err := rows.Scan(&r.Stage, &ts, &ev); err != nil {
			return nil, fmt.Errorf("reading audit record of %s: %w", auditID, err)
		}
		r.StageTimestamp, r.Event = fromNanos(ts), []byte(ev)
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading audit records of %s: %w", auditID, err)
	}
	return out, nil
}

// scanner is *sql.Row or *sql.Rows.
type scanner interface {
	Scan(dest ...any) error
}

func scanSession(sc scanner) (Session, int64, error) {
	var (
		ss                                           Session
		id, received, updated, count                 int64
		end, first, last                             sql.NullInt64
		groups, extra, imp, ips, command, stages, fl sql.NullString
		env                                          sql.NullString
	)
	err := sc.Scan(&id, &ss.AuditID, &ss.Username, &ss.UID, &groups, &extra, &imp, &ips,
		&ss.UserAgent, &ss.Namespace, &ss.Pod, &ss.Container, &command, &ss.Verb, &ss.Subresource,
		&ss.Code, &ss.Decision, &ss.Reason, &received, &end, &stages, &fl, &updated,
		&env, &ss.Stdin, &ss.TTY, &count, &first, &last)
	if errors.Is(err, sql.ErrNoRows) {
		return Session{}, 0, err
	}
	if err != nil {
		return Session{}, 0, fmt.Errorf("reading session row: %w", err)
	}
	ss.RequestReceived, ss.End, ss.UpdatedAt = fromNanos(received), fromNullNanos(end), fromNanos(updated)
	ss.ProcessCount = int(count)
	ss.FirstProcess, ss.LastProcess = fromNanos(first.Int64), fromNanos(last.Int64)
	for _, c := range []struct {
		col sql.NullString
		dst any
	}{{groups, &ss.Groups}, {extra, &ss.Extra}, {imp, &ss.ImpersonatedUser}, {ips, &ss.SourceIPs},
		{command, &ss.Command}, {env, &ss.Env}, {stages, &ss.Stages}, {fl, &ss.Flags}} {
		if err := decodeJSON(c.col, c.dst); err != nil {
			return Session{}, 0, fmt.Errorf("reading session %s: %w", ss.AuditID, err)
		}
	}
	return ss, id, nil
}
