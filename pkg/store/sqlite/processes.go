package sqlite

import (
	"context"
	"database/sql"
	"fmt"

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
	return list(ctx, s, "processes", processesListing(f), f.Cursor, f.Limit, func(sc scanner) (join.Process, cursor, error) {
		p, id, err := scanProcess(sc)
		return p, cursor{t: nanos(p.Start), id: id}, err
	})
}

// processesListing is ListProcesses' query.
func processesListing(f store.ProcessFilter) listing {
	l := listing{cols: processCols, from: "processes p", timeCol: "p.start", idCol: "p.id"}
	w := &l.w
	if f.User != "" {
		l.sorts = true
		w.add(`p.audit_id IN (SELECT u.audit_id FROM session_users u WHERE u.username = ?)`, f.User)
	}
	if f.Group != "" {
		l.sorts = true
		w.add(`p.audit_id IN (SELECT g.audit_id FROM session_groups g WHERE g.grp = ?)`, f.Group)
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
