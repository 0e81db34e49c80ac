package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"

	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/store"
)

// sessionCols selects a session row and its process aggregates, which the
// processes_audit and process_runs_audit indexes answer without touching
// the process rows (a run's count and bounds are in its index entry).
const sessionCols = `s.id, s.audit_id, s.username, s.uid, s.groups, s.extra, s.impersonated,
	s.source_ips, s.user_agent, s.namespace, s.pod, s.container, s.command, s.verb, s.subresource,
	s.code, s.decision, s.reason, s.request_received, s.end_time, s.stages, s.flags, s.updated_at,
	s.env, s.stdin, s.tty, s.ports, s.request_uri, s.annotations, s.spo_request_uid, s.conflicts,
	(SELECT count(*) FROM processes p WHERE p.audit_id = s.audit_id) +
		(SELECT coalesce(sum(r.n), 0) FROM process_runs r WHERE r.audit_id = s.audit_id),
	(SELECT min(v) FROM (SELECT min(p.start) AS v FROM processes p WHERE p.audit_id = s.audit_id
		UNION ALL SELECT min(r.first_start) FROM process_runs r WHERE r.audit_id = s.audit_id)),
	(SELECT max(v) FROM (SELECT max(p.start) AS v FROM processes p WHERE p.audit_id = s.audit_id
		UNION ALL SELECT max(r.last_start) FROM process_runs r WHERE r.audit_id = s.audit_id))`

// ListSessions returns one page of sessions matching f, newest
// RequestReceived first, and the cursor of the next page ("" after the
// last). Pages are keyset-paginated on (RequestReceived, row id): rows
// inserted while a client pages never shift the rows it has yet to see.
func (s *Store) ListSessions(ctx context.Context, f store.SessionFilter) ([]join.Session, string, error) {
	cmds, none, err := s.commandFilter(ctx, f.Command, f.Cursor)
	if err != nil || none {
		return []join.Session{}, "", err // an empty page, as list gives, not nil (JSON null)
	}
	return list(ctx, s, "sessions", sessionsListing(f, cmds), f.Cursor, f.Limit, func(sc scanner) (join.Session, cursor, error) {
		ss, id, err := scanSession(sc)
		return ss, cursor{t: nanos(ss.RequestReceivedTimestamp), id: id}, err
	})
}

// sessionsListing is ListSessions' query.
func sessionsListing(f store.SessionFilter, cmds commandMatch) listing {
	l := listing{cols: sessionCols, from: "sessions s", timeCol: "s.request_received", idCol: "s.id"}
	w := &l.w
	// A user or group filter walks its side table's (name, time, id) key in
	// order and joins each row; with both, the user's rows drive and the
	// group is a key lookup.
	switch {
	case f.User != "":
		l.from = "session_users u JOIN sessions s ON s.id = u.session_id"
		l.timeCol, l.idCol = "u.request_received", "u.session_id"
		w.add("u.username = ?", f.User)
		if f.Group != "" {
			w.add(`EXISTS (SELECT 1 FROM session_groups g WHERE g.grp = ?
				AND g.request_received = u.request_received AND g.session_id = u.session_id)`, f.Group)
		}
	case f.Group != "":
		l.from = "session_groups g JOIN sessions s ON s.id = g.session_id"
		l.timeCol, l.idCol = "g.request_received", "g.session_id"
		w.add("g.grp = ?", f.Group)
	}
	w.eq("s.namespace", f.Namespace)
	w.eq("s.pod", f.Pod)
	w.eq("s.container", f.Container)
	if f.Command != "" {
		// Only the part of the time index where those commands were asked
		// for; the row's own line decides.
		w.add(l.timeCol+" BETWEEN ? AND ?", cmds.first, cmds.last)
		w.add(holdsBytes("s.command_line"), f.Command)
	}
	w.window(l.timeCol, f.Since, f.Until)
	return l
}

// GetSession returns the session with its audit record stages and its
// processes, oldest first, or store.ErrNotFound.
func (s *Store) GetSession(ctx context.Context, auditID string) (store.SessionDetail, error) {
	// One read transaction, so the session and its processes are one
	// snapshot.
	tx, err := s.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return store.SessionDetail{}, fmt.Errorf("beginning session read: %w", err)
	}
	defer tx.Rollback()
	st, err := s.readStmt(ctx, tx, sessionRowSQL)
	if err != nil {
		return store.SessionDetail{}, fmt.Errorf("reading session %s: %w", auditID, err)
	}
	row := st.QueryRowContext(ctx, auditID)
	ss, _, err := scanSession(row)
	if errors.Is(err, sql.ErrNoRows) {
		return store.SessionDetail{}, fmt.Errorf("reading session %s: %w", auditID, store.ErrNotFound)
	}
	if err != nil {
		return store.SessionDetail{}, err
	}
	d := store.SessionDetail{Session: ss}
	if d.AuditRecords, err = s.auditRecords(ctx, tx, auditID); err != nil {
		return store.SessionDetail{}, err
	}
	if d.Processes, d.ProcessesTruncated, err = s.sessionProcesses(ctx, tx, "audit_id", auditID); err != nil {
		return store.SessionDetail{}, err
	}
	d.Processes = store.NonNil(d.Processes)
	if d.Claimants, _, err = s.sessionProcesses(ctx, tx, "claimed_audit_id", auditID); err != nil {
		return store.SessionDetail{}, err
	}
	return d, nil
}

// sessionProcessesSQL selects a session's processes by col. The "!= ”"
// lets SQLite use the partial processes_claimed index: a bound parameter
// alone does not prove the row matches the index's WHERE.
func sessionProcessesSQL(col string) string {
	return "SELECT " + processCols + " FROM " + processesFrom + " WHERE p." + col + " = ? AND p." + col +
		" != '' ORDER BY p.start, p.id LIMIT ?"
}

// sessionProcesses returns up to SessionProcessLimit processes whose col
// (audit_id or claimed_audit_id) is auditID, oldest first, and whether
// there were more.
func (s *Store) sessionProcesses(ctx context.Context, tx *sql.Tx, col, auditID string) ([]join.Process, bool, error) {
	limit := s.cfg.SessionProcessLimit
	st, err := s.readStmt(ctx, tx, sessionProcessesSQL(col))
	if err != nil {
		return nil, false, fmt.Errorf("querying processes of session %s: %w", auditID, err)
	}
	rows, err := st.QueryContext(ctx, auditID, limit+1)
	if err != nil {
		return nil, false, fmt.Errorf("querying processes of session %s: %w", auditID, err)
	}
	defer rows.Close()
	var all []listed
	for rows.Next() {
		p, id, err := scanProcess(rows)
		if err != nil {
			return nil, false, err
		}
		all = append(all, listed{p: p, pos: cursor{t: nanos(p.Start), id: id}})
	}
	if err := rows.Err(); err != nil {
		return nil, false, fmt.Errorf("reading processes of session %s: %w", auditID, err)
	}
	runs, err := s.sessionRunProcesses(ctx, tx, col, auditID, limit+1)
	if err != nil {
		return nil, false, err
	}
	if len(all) == 0 {
		all = runs // most sessions' processes are all in runs: no copy
	} else {
		all = append(all, runs...)
	}
	slices.SortFunc(all, func(a, b listed) int { return newestFirst(b, a) })
	truncated := len(all) > limit
	all = all[:min(len(all), limit)]
	if err := s.fillArgvs(ctx, tx, all); err != nil {
		return nil, false, err
	}
	var out []join.Process // nil for none, as before
	if len(all) > 0 {
		out = make([]join.Process, len(all))
	}
	for i := range all {
		out[i] = all[i].p
	}
	return out, truncated, nil
}

// sessionRowSQL reads a session by its audit ID.
const sessionRowSQL = "SELECT " + sessionCols + " FROM sessions s WHERE s.audit_id = ?"

// auditRecordsSQL reads a session's audit record stages.
const auditRecordsSQL = `SELECT stage, stage_timestamp, event FROM audit_records
		WHERE audit_id = ? ORDER BY stage_timestamp, stage, request_key`

func (s *Store) auditRecords(ctx context.Context, tx *sql.Tx, auditID string) ([]store.AuditRecord, error) {
	st, err := s.readStmt(ctx, tx, auditRecordsSQL)
	if err != nil {
		return nil, fmt.Errorf("querying audit records of %s: %w", auditID, err)
	}
	rows, err := st.QueryContext(ctx, auditID)
	if err != nil {
		return nil, fmt.Errorf("querying audit records of %s: %w", auditID, err)
	}
	defer rows.Close()
	var out []store.AuditRecord
	for rows.Next() {
		r := store.AuditRecord{AuditID: auditID}
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

func scanSession(sc scanner) (join.Session, int64, error) {
	var (
		ss                                  join.Session
		id, received, updated, count        int64
		stdin, tty                          int64
		end, first, last                    sql.NullInt64
		groups, extra, imp, ips, command    sql.NullString
		stages, fl, env, ports, ann, confls sql.NullString
	)
	u := &ss.User
	err := sc.Scan(&id, &ss.AuditID, &u.Username, &u.UID, &groups, &extra, &imp, &ips,
		&ss.UserAgent, &ss.Namespace, &ss.Pod, &ss.Container, &command, &ss.Verb, &ss.Subresource,
		&ss.Code, &ss.Decision, &ss.Reason, &received, &end, &stages, &fl, &updated,
		&env, &stdin, &tty, &ports, &ss.RequestURI, &ann, &ss.SPOExecRequestUID, &confls,
		&count, &first, &last)
	if errors.Is(err, sql.ErrNoRows) {
		return join.Session{}, 0, err
	}
	if err != nil {
		return join.Session{}, 0, fmt.Errorf("reading session row: %w", err)
	}
	ss.RequestReceivedTimestamp, ss.EndTimestamp = fromNanos(received), fromNanos(end.Int64)
	ss.Stdin, ss.TTY = fromTri(stdin), fromTri(tty)
	ss.UpdatedAt, ss.ProcessCount = fromNanos(updated), int(count)
	ss.FirstProcess, ss.LastProcess = fromNanos(first.Int64), fromNanos(last.Int64)
	if err := decodeJSON(jsonColumn{groups, &u.Groups}, jsonColumn{extra, &u.Extra},
		jsonColumn{imp, &ss.ImpersonatedUser}, jsonColumn{ips, &ss.SourceIPs}, jsonColumn{command, &ss.Command},
		jsonColumn{env, &ss.Env}, jsonColumn{stages, &ss.Stages}, jsonColumn{fl, &ss.Flags},
		jsonColumn{ports, &ss.Ports}, jsonColumn{ann, &ss.Annotations}, jsonColumn{confls, &ss.Conflicts}); err != nil {
		return join.Session{}, 0, fmt.Errorf("reading session %s: %w", ss.AuditID, err)
	}
	store.FillSession(&ss) // an empty list is stored as NULL
	return ss, id, nil
}

// The stdin and tty columns hold 1 (true), 0 (false, and every row written
// before unknown was kept) or -1: the audit log did not say.
func triInt(b *bool) int64 {
	switch {
	case b == nil:
		return -1
	case *b:
		return 1
	}
	return 0
}

func fromTri(v int64) *bool {
	if v < 0 {
		return nil
	}
	b := v != 0
	return &b
}
