package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/store"
	"github.com/execid/correlator/pkg/vocab"
)

const processCols = `p.id, p.process_id, p.filename, c.argv, p.namespace, p.pod, p.container, p.start,
	p.exec_time, p.exit_time, p.exit_code, p.audit_id, p.claimed_audit_id, p.spo_request_uid,
	p.attribution, p.detail`

// processesFrom joins each process to its argv (schema 7). An id with no
// row (none is left so) reads as an empty argv.
const processesFrom = `processes p LEFT JOIN commands c ON c.id = p.command_id`

// ListProcesses returns one page of processes matching f, newest Start
// first, and the cursor of the next page ("" after the last), keyset
// paginated on (Start, row id) like ListSessions.
func (s *Store) ListProcesses(ctx context.Context, f store.ProcessFilter) ([]join.Process, string, error) {
	broad, err := s.broadSessionFilter(ctx, f)
	if err != nil {
		return nil, "", err
	}
	cmds, none, err := s.commandFilter(ctx, f.Command, f.Cursor)
	if err != nil || none {
		return []join.Process{}, "", err // an empty page, as list gives, not nil (JSON null)
	}
	cur, hasCur, err := parseCursor(f.Cursor)
	if err != nil {
		return nil, "", err
	}
	limit := store.PageLimit(f.Limit, s.cfg.DefaultLimit, s.cfg.MaxLimit)
	// Its statements are prepared before the transaction takes a connection.
	listing := processesListing(f, broad, cmds)
	if err := s.prepareProcessQueries(ctx, f, broad, cmds, listing, limit, cur, hasCur); err != nil {
		return nil, "", err
	}
	// One snapshot: a commit moving a process out of a run between the
	// two reads would show it twice, or not at all.
	tx, err := s.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, "", fmt.Errorf("beginning process read: %w", err)
	}
	defer tx.Rollback()
	// The newest limit+1 of each store, merged: the extra one says
	// whether a next page exists.
	page, err := processRows(ctx, listTx{s, tx}, listing, f.Cursor, limit)
	if err != nil {
		return nil, "", err
	}
	if cmds.runs, cmds.fewRuns, err = commandRuns(ctx, listTx{s, tx}, cmds, s.cfg.CommandRuns); err != nil {
		return nil, "", err
	}
	runs, err := s.runProcesses(ctx, tx, processRunSearch(f, broad, cmds, cur, hasCur), limit+1)
	if err != nil {
		return nil, "", err
	}
	page = append(page, runs...)
	slices.SortFunc(page, newestFirst)
	next := ""
	if len(page) > limit {
		page, next = page[:limit], page[limit-1].pos.String()
	}
	if err := s.fillArgvs(ctx, tx, page); err != nil {
		return nil, "", err
	}
	out := make([]join.Process, len(page))
	for i := range page {
		out[i] = page[i].p
	}
	return out, next, nil
}

// prepareProcessQueries prepares the statements a process listing will
// run (prepareList): the rows' page, the count of a command's runs and
// the runs' query either way that count goes. Preparing them on each
// query was a tenth of a command search's CPU (make soak's store).
func (s *Store) prepareProcessQueries(ctx context.Context, f store.ProcessFilter, broad bool, cmds commandMatch,
	l listing, limit int, cur cursor, hasCur bool) error {
	qs := []string{}
	if q, _, err := l.query(f.Cursor, limit); err == nil {
		qs = append(qs, q)
	}
	if q := commandRunsSQL(cmds); q != "" {
		qs = append(qs, q)
	}
	for _, few := range []bool{false, true} {
		cmds.fewRuns = few
		rs := processRunSearch(f, broad, cmds, cur, hasCur)
		if rs.listed {
			qs = append(qs, rs.readQuery())
		} else {
			qs = append(qs, rs.query())
		}
	}
	for _, q := range qs {
		if err := s.prepareList(ctx, q); err != nil {
			return err
		}
	}
	return nil
}

// processRows reads up to limit+1 processes rows of l after cursor c.
func processRows(ctx context.Context, q queryer, l listing, c string, limit int) ([]listed, error) {
	query, args, err := l.query(c, limit)
	if err != nil {
		return nil, err
	}
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("querying processes: %w", err)
	}
	defer rows.Close()
	// Sized for a page: grown from nothing, a page of a hundred processes
	// allocated room for 255 on the way.
	out := make([]listed, 0, min(limit+1, 256))
	for rows.Next() {
		p, id, err := scanProcess(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, listed{p: p, pos: cursor{t: nanos(p.Start), id: id}})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading processes: %w", err)
	}
	return out, nil
}

// processesListing is ListProcesses' query. A user or group filter
// probes processes_audit with the IDs of its sessions and sorts every
// match, unless broad (broadSessionFilter): then the unary + keeps the
// planner off processes_audit, and it walks the processes in page order,
// looking each one's audit ID up among the sessions'.
func processesListing(f store.ProcessFilter, broad bool, cmds commandMatch) listing {
	l := listing{cols: processCols, from: processesFrom, table: "processes p", timeCol: "p.start", idCol: "p.id"}
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
	if f.Unattributed {
		// Unattributed processes are in processes_attribution too; a
		// literal '' does not prove its condition to the planner either.
		w.add("p.attribution = '" + string(vocab.AttributionNone) + "'")
		w.add("p.attribution != '" + string(vocab.AttributionInherited) + "'")
	}
	if f.Command != "" {
		// Only the part of processes_start where those commands ran.
		w.add("p.start BETWEEN ? AND ?", cmds.first, cmds.last)
		if cmds.all {
			w.add("p.command_id IN (SELECT id FROM commands WHERE "+holdsBytes("line")+")", f.Command)
		} else {
			w.add("p.command_id IN ("+strings.TrimSuffix(strings.Repeat("?,", len(cmds.ids)), ",")+")", cmds.ids...)
		}
	}
	w.window("p.start", f.Since, f.Until)
	return l
}

// maxCommandIDs is how many matching commands a process listing names by
// id; past it the listing selects them again in a subquery.
const maxCommandIDs = 256

// commandMatch is the commands whose line holds a searched substring: up
// to maxCommandIDs ids (all: more matched), and the span of their starts.
type commandMatch struct {
	ids         []any
	all         bool
	first, last int64
	set         map[int64]bool // every id, for the runs' processes
	// fewRuns: fewer than Config.CommandRuns runs list them; runs are
	// those, newest bound first (commandRuns).
	fewRuns bool
	runs    []runBound
}

// commandFilter matches sub (matchCommands); none reports that a listing
// filtered by it is empty whatever else it asks, no command line holding
// sub (a bad cursor is still refused).
func (s *Store) commandFilter(ctx context.Context, sub, cur string) (m commandMatch, none bool, err error) {
	if m, err = s.matchCommands(ctx, sub); err != nil || sub == "" || len(m.ids) > 0 {
		return m, false, err
	}
	if _, _, err := parseCursor(cur); err != nil {
		return m, false, err
	}
	return m, true, nil
}

// padIDs repeats the last id until there are a power of two of them, at
// least 8. A listing names them in an IN list, and its statement is kept
// prepared per distinct SQL text (listQuery, at most 128): one text per
// count filled that cache with command searches, each prepared on every
// reader connection in SQLite's memory, and the soak's agent grew for as
// long as new counts came.
func padIDs(ids []any) []any {
	if len(ids) == 0 {
		return ids
	}
	n := 8
	for n < len(ids) {
		n *= 2
	}
	for len(ids) < n {
		ids = append(ids, ids[len(ids)-1])
	}
	return ids
}

// holdsBytes is the condition that col holds the bound substring, byte for
// byte: instr on text steps a character at a time, and would never find a
// substring that begins inside a character.
func holdsBytes(col string) string {
	return "instr(CAST(" + col + " AS BLOB), CAST(? AS BLOB)) > 0"
}

func scanProcess(sc scanner) (join.Process, int64, error) {
	var (
		p                   join.Process
		id, start, execTime int64
		exit, code          sql.NullInt64
		argv, detail        sql.NullString
	)
	err := sc.Scan(&id, &p.ProcessID, &p.Filename, &argv, &p.Namespace, &p.Pod, &p.Container, &start,
		&execTime, &exit, &code, &p.AuditID, &p.ClaimedAuditID, &p.SPOExecRequestUID, &p.Attribution, &detail)
	if err != nil {
		return join.Process{}, 0, fmt.Errorf("reading process row: %w", err)
	}
	p.Start, p.ExecTime, p.Exit = fromNanos(start), fromNanos(execTime), fromNanos(exit.Int64)
	if code.Valid {
		c := int(code.Int64)
		p.ExitCode = &c
	}
	if err := decodeJSON(jsonColumn{argv, &p.Argv}); err != nil {
		return join.Process{}, 0, fmt.Errorf("reading process %s: %w", p.ProcessID, err)
	}
	if err := readProcessDetail(detail, &p); err != nil {
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
	// P counts what a sort would hold: a processes row, or a run.
	if err := s.r.QueryRowContext(ctx, `SELECT coalesce((SELECT max(id) FROM sessions), 0),
		coalesce((SELECT max(id) FROM processes), 0) + coalesce((SELECT max(id) FROM process_runs), 0)`).
		Scan(&sessions, &procs); err != nil {
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
