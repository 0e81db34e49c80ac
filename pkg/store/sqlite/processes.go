package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"math"

	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/store"
	"github.com/execid/correlator/pkg/vocab"
)

const processCols = `p.id, p.process_id, p.parent_process_id, p.pid, p.ppid, p.uid, p.filename,
	p.argv, p.argv_truncated, p.container_id, p.pod_uid, p.namespace, p.pod, p.container, p.start,
	p.exec_time, p.exit_time, p.exit_code, p.audit_id, p.claimed_audit_id, p.spo_request_uid,
	p.attribution, p.confidence, p.candidates, p.source, p.flags, p.session_root_id`

// ListProcesses returns one page of processes matching f, newest Start
// first, and the cursor of the next page ("" after the last), keyset
// paginated on (Start, row id) like ListSessions.
func (s *Store) ListProcesses(ctx context.Context, f store.ProcessFilter) ([]join.Process, string, error) {
	broad, err := s.broadSessionFilter(ctx, f)
	if err != nil {
		return nil, "", err
	}
	return list(ctx, s, "processes", processesListing(f, broad), f.Cursor, f.Limit, func(sc scanner) (join.Process, cursor, error) {
		p, id, err := scanProcess(sc)
		return p, cursor{t: nanos(p.Start), id: id}, err
	})
}

// processesListing is ListProcesses' query. A user or group filter
// probes processes_audit with the IDs of its sessions and sorts every
// match, unless broad (broadSessionFilter): then the unary + keeps the
// planner off processes_audit, and it walks the processes in page order,
// looking each one's audit ID up among the sessions'.
func processesListing(f store.ProcessFilter, broad bool) listing {
	l := listing{cols: processCols, from: "processes p", timeCol: "p.start", idCol: "p.id"}
	w := &l.w
	col := "p.audit_id"
	if broad {
		col = "+p.audit_id"
	}
	if f.User != "" {
		l.sorts = !broad
		w.add(col+` IN (SELECT u.audit_id FROM session_users u WHERE u.username = ?)`, f.User)
	}
	if f.Group != "" {
		l.sorts = !broad
		w.add(col+` IN (SELECT g.audit_id FROM session_groups g WHERE g.grp = ?)`, f.Group)
	}
	w.eq("p.namespace", f.Namespace)
	w.eq("p.pod", f.Pod)
	w.eq("p.container", f.Container)
	w.eq("p.audit_id", f.AuditID)
	if a := f.Attribution; a != "" {
		w.add("p.attribution = ?", string(a))
		if a != vocab.AttributionInherited {
			// Names processes_attribution's condition, so the planner may
			// walk that index (a bound value proves nothing).
			w.add("p.attribution != '" + string(vocab.AttributionInherited) + "'")
		}
	}
	if f.Command != "" {
		w.add("instr(p.argv_line, ?) > 0", f.Command)
	}
	w.window("p.start", f.Since, f.Until)
	return l
}

func scanProcess(sc scanner) (join.Process, int64, error) {
	var (
		p                   join.Process
		id, start, execTime int64
		exit, code          sql.NullInt64
		argv, cands, flags  sql.NullString
	)
	err := sc.Scan(&id, &p.ProcessID, &p.ParentProcessID, &p.PID, &p.PPID, &p.UID, &p.Filename,
		&argv, &p.ArgvTruncated, &p.ContainerID, &p.PodUID, &p.Namespace, &p.Pod, &p.Container, &start,
		&execTime, &exit, &code, &p.AuditID, &p.ClaimedAuditID, &p.SPOExecRequestUID,
		&p.Attribution, &p.Confidence, &cands, &p.Source, &flags, &p.SessionRootID)
	if err != nil {
		return join.Process{}, 0, fmt.Errorf("reading process row: %w", err)
	}
	p.Start, p.ExecTime, p.Exit = fromNanos(start), fromNanos(execTime), fromNanos(exit.Int64)
	if code.Valid {
		c := int(code.Int64)
		p.ExitCode = &c
	}
	if err := decodeJSON(jsonColumn{argv, &p.Argv}, jsonColumn{cands, &p.Candidates},
		jsonColumn{flags, &p.Flags}); err != nil {
		return join.Process{}, 0, fmt.Errorf("reading process %s: %w", p.ProcessID, err)
	}
	store.FillProcess(&p) // an empty list is stored as NULL
	return p, id, nil
}

// broadSessionFilter reports whether f's user or group has so many
// sessions that walking the processes in page order, each looked up among
// them, reads fewer rows than sorting all theirs: sorting costs about k*P
// for k sessions of P processes each, the walk about n*S/k rows for a page
// of n among S sessions, so the walk wins once k*k*P > n*S. S and P are
// read from the highest row ids (retention makes them overestimates), k is
// counted only up to where the answer is known.
func (s *Store) broadSessionFilter(ctx context.Context, f store.ProcessFilter) (bool, error) {
	if f.User == "" && f.Group == "" {
		return false, nil
	}
	var sessions, procs int64
	if err := s.r.QueryRowContext(ctx, `SELECT coalesce((SELECT max(id) FROM sessions), 0),
		coalesce((SELECT max(id) FROM processes), 0)`).Scan(&sessions, &procs); err != nil {
		return false, fmt.Errorf("sizing the store for a user or group filter: %w", err)
	}
	if sessions == 0 || procs == 0 {
		return false, nil
	}
	n := float64(store.PageLimit(f.Limit, s.cfg.DefaultLimit, s.cfg.MaxLimit))
	// k*k*P > n*S with P = procs/sessions: k > S*sqrt(n/procs).
	need := int64(float64(sessions)*math.Sqrt(n/float64(procs))) + 1
	broad := true
	for _, q := range []struct{ table, col, name string }{
		{"session_users", "username", f.User}, {"session_groups", "grp", f.Group},
	} {
		if q.name == "" {
			continue
		}
		var k int64
		if err := s.r.QueryRowContext(ctx, `SELECT count(*) FROM (SELECT 1 FROM `+q.table+` WHERE `+q.col+
			` = ? LIMIT ?)`, q.name, need).Scan(&k); err != nil {
			return false, fmt.Errorf("counting the sessions of a user or group filter: %w", err)
		}
		broad = broad && k >= need // both filters must be broad for the walk to win
	}
	return broad, nil
}
