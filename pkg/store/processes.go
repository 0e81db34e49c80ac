package store

import (
	"context"
	"database/sql"
	"fmt"
)

const processCols = `p.id, p.process_id, p.parent_process_id, p.pid, p.ppid, p.uid, p.filename,
	p.argv, p.container_id, p.pod_uid, p.namespace, p.pod, p.container, p.start, p.exit_time,
	p.exit_code, p.audit_id, p.claimed_audit_id, p.attribution, p.confidence, p.candidates,
	p.source, p.flags, p.session_root_id`

// ListProcesses returns one page of processes matching f, newest Start
// first, and the cursor of the next page ("" after the last), keyset
// paginated on (Start, row id) like ListSessions.
func (s *Store) ListProcesses(ctx context.Context, f ProcessFilter) ([]Process, string, error) {
	q, args, limit, err := s.processesQuery(f)
	if err != nil {
		return nil, "", err
	}
	rows, err := s.r.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, "", fmt.Errorf("querying processes: %w", err)
	}
	defer rows.Close()
	var out []Process
	var ids []int64
	for rows.Next() {
		p, id, err := scanProcess(rows)
		if err != nil {
			return nil, "", err
		}
		out = append(out, p)
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		return nil, "", fmt.Errorf("reading processes: %w", err)
	}
	next := ""
	if len(out) > limit {
		out = out[:limit]
		next = cursor{t: nanos(out[limit-1].Start), id: ids[limit-1]}.String()
	}
	return out, next, nil
}

// processesQuery builds ListProcesses' query, which fetches limit+1 rows
// to tell whether a next page exists.
func (s *Store) processesQuery(f ProcessFilter) (string, []any, int, error) {
	cur, hasCur, err := parseCursor(f.Cursor)
	if err != nil {
		return "", nil, 0, err
	}
	limit := s.limit(f.Limit)
	var w where
	if f.User != "" {
		w.add(`p.audit_id IN (SELECT s.audit_id FROM session_users u
			JOIN sessions s ON s.id = u.session_id WHERE u.username = ?)`, f.User)
	}
	if f.Group != "" {
		w.add(`p.audit_id IN (SELECT s.audit_id FROM session_groups g
			JOIN sessions s ON s.id = g.session_id WHERE g.grp = ?)`, f.Group)
	}
	w.eq("p.namespace", f.Namespace)
	w.eq("p.pod", f.Pod)
	w.eq("p.container", f.Container)
	w.eq("p.audit_id", f.AuditID)
	w.eq("p.attribution", f.Attribution)
	if f.Command != "" {
		w.add("instr(p.argv_line, ?) > 0", f.Command)
	}
	w.window("p.start", f.Since, f.Until)
	w.after("p.start", "p.id", cur, hasCur)
	q := "SELECT " + processCols + " FROM processes p" + w.String() +
		" ORDER BY p.start DESC, p.id DESC LIMIT ?"
	return q, append(w.args, limit+1), limit, nil
}

func scanProcess(sc scanner) (Process, int64, error) {
	var (
		p                  Process
		id, start          int64
		exit, code         sql.NullInt64
		argv, cands, flags sql.NullString
	)
	err := sc.Scan(&id, &p.ProcessID, &p.ParentProcessID, &p.PID, &p.PPID, &p.UID, &p.Filename,
		&argv, &p.ContainerID, &p.PodUID, &p.Namespace, &p.Pod, &p.Container, &start, &exit,
		&code, &p.AuditID, &p.ClaimedAuditID, &p.Attribution, &p.Confidence, &cands,
		&p.Source, &flags, &p.SessionRootID)
	if err != nil {
		return Process{}, 0, fmt.Errorf("reading process row: %w", err)
	}
	p.Start, p.Exit = fromNanos(start), fromNullNanos(exit)
	if code.Valid {
		c := int(code.Int64)
		p.ExitCode = &c
	}
	for _, c := range []struct {
		col sql.NullString
		dst any
	}{{argv, &p.Argv}, {cands, &p.Candidates}, {flags, &p.Flags}} {
		if err := decodeJSON(c.col, c.dst); err != nil {
			return Process{}, 0, fmt.Errorf("reading process %s: %w", p.ProcessID, err)
		}
	}
	return p, id, nil
}
