package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"unsafe"

	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/store"
	"github.com/execid/correlator/pkg/vocab"
)

// listed is a process on its way to a page, with its keyset position;
// command is its argv's id while the argv is still to be read (runs).
type listed struct {
	p       join.Process
	pos     cursor
	command int64
}

// newestFirst orders positions newest first, as pages list them.
func newestFirst(a, b listed) int {
	return cmp.Or(cmp.Compare(b.pos.t, a.pos.t), cmp.Compare(b.pos.id, a.pos.id))
}

// queryer is a read transaction or the read pool.
type queryer interface {
	QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error)
}

// runHit is a run's process that may make a page: its line is decoded
// only once it does.
type runHit struct {
	pos  cursor
	line []byte
	run  *runRow
}

// runSearch is what a listing asks of the runs' processes.
type runSearch struct {
	// listed: read runs, by id in their order, not the runs walked in
	// page order (commandRuns).
	listed  bool
	runs    []runBound
	where   where
	cur     cursor
	hasCur  bool
	since   int64 // 0: none
	until   int64 // 0: none
	command map[int64]bool
}

// runProcesses returns the need newest processes of runs matching rs,
// newest first. Runs are read newest last_start first; a run whose
// last_start is older than the need-th process found holds none newer.
//
// The runs are ordered by their ids and last starts alone (a filter
// through a side table sorts its matches), or, listed for a rare command,
// by the bounds process_run_commands holds (commandRuns); a run's body is
// read only when its turn comes.
func (s *Store) runProcesses(ctx context.Context, tx *sql.Tx, rs *runSearch, need int) ([]listed, error) {
	src, err := s.openRuns(ctx, tx, rs)
	if err != nil {
		return nil, err
	}
	defer src.close()
	var best []runHit
	for {
		r := &runRow{}
		last, ok, err := src.next(r)
		if err != nil {
			return nil, err
		}
		if !ok || len(best) == need && last < best[need-1].pos.t || rs.since != 0 && last < rs.since {
			break
		}
		body, err := src.read(ctx, r)
		if errors.Is(err, errRunFiltered) {
			continue
		}
		if err != nil {
			return nil, err
		}
		var bad error
		err = eachLineNewest(body, func(line []byte) bool {
			start, command, seq, ok := entryHead(line)
			if !ok {
				bad = fmt.Errorf("reading run %d: a line without its head", r.id)
				return false
			}
			if len(best) == need && start < best[need-1].pos.t || rs.since != 0 && start < rs.since {
				return false // the lines left started earlier still
			}
			h := runHit{pos: cursor{t: start, id: entryID(r.id, seq)}, line: line, run: r}
			if !rs.wants(h.pos, command) {
				return true
			}
			i, _ := slices.BinarySearchFunc(best, h, func(a, b runHit) int {
				return newestFirst(listed{pos: a.pos}, listed{pos: b.pos})
			})
			if i < need {
				best = slices.Insert(best, i, h)[:min(len(best)+1, need)]
			}
			return true
		})
		if err = cmp.Or(bad, err); err != nil {
			return nil, fmt.Errorf("reading run %d: %w", r.id, err)
		}
	}
	return decodeHits(best)
}

// query selects the runs' ids and last starts, newest first.
func (rs *runSearch) query() string {
	return `SELECT r.id, r.last_start FROM process_runs r` + rs.where.String() + ` ORDER BY r.last_start DESC, r.id DESC`
}

// wants reports whether a run's process at pos, running command, passes
// the search's window, cursor and command.
func (rs *runSearch) wants(pos cursor, command int64) bool {
	switch {
	case rs.since != 0 && pos.t < rs.since, rs.until != 0 && pos.t >= rs.until:
		return false
	case rs.hasCur && (pos.t > rs.cur.t || pos.t == rs.cur.t && pos.id >= rs.cur.id):
		return false
	case rs.command != nil && !rs.command[command]:
		return false
	}
	return true
}

func decodeHits(hits []runHit) ([]listed, error) {
	out := make([]listed, 0, len(hits))
	for _, h := range hits {
		p, command, id, err := decodeEntry(h.line, h.run)
		if err != nil {
			return nil, err
		}
		out = append(out, listed{p: p, pos: cursor{t: nanos(p.Start), id: id}, command: command})
	}
	return out, nil
}

// processRunSearch is ListProcesses' search of the runs.
//
// A user or group filter probes process_runs_audit with the IDs of its
// sessions and sorts the matches, unless broad (broadSessionFilter): then
// the walk of process_runs_start in page order wins, as for the rows.
func processRunSearch(f store.ProcessFilter, broad bool, cmds commandMatch, cur cursor, hasCur bool) *runSearch {
	rs := &runSearch{cur: cur, hasCur: hasCur, since: nanos(f.Since), until: nanos(f.Until)}
	w := &rs.where
	col := "r.audit_id"
	if broad {
		col = "+r.audit_id"
	}
	if f.User != "" {
		w.add(col+` IN (SELECT u.audit_id FROM session_users u WHERE u.username = ?)`, f.User)
	}
	if f.Group != "" {
		w.add(col+` IN (SELECT g.audit_id FROM session_groups g WHERE g.grp = ?)`, f.Group)
	}
	w.eq("r.namespace", f.Namespace)
	w.eq("r.pod", f.Pod)
	w.eq("r.container", f.Container)
	w.eq("r.audit_id", f.AuditID)
	w.eq("r.attribution", string(f.Attribution))
	if f.Unattributed {
		w.add("r.attribution = ?", string(vocab.AttributionNone))
	}
	// A run's starts span less than runSpan: a bound on first_start is
	// one on last_start, which process_runs_start walks.
	if f.Command != "" {
		w.add("r.last_start >= ? AND r.last_start < ? AND r.first_start <= ?", cmds.first, satAdd(cmds.last, runSpan), cmds.last)
		rs.command = cmds.set
		in := strings.TrimSuffix(strings.Repeat("?,", len(cmds.ids)), ",")
		switch {
		case cmds.all, len(cmds.ids) == 0:
			// Too many commands to name: each run's lines are read.
		case cmds.fewRuns:
			// The runs that ran them, by id in their order: a rare
			// command's search reads its runs, not the pod's.
			rs.listed, rs.runs = true, cmds.runs
		default:
			// Many runs ran them: walk in page order as before, but read
			// only the bodies of runs that list one.
			w.add("EXISTS (SELECT 1 FROM process_run_commands c WHERE c.run = r.id AND c.command_id IN ("+in+"))", cmds.ids...)
		}
	}
	if rs.since != 0 {
		w.add("r.last_start >= ?", rs.since)
	}
	if rs.until != 0 {
		w.add("r.last_start < ? AND r.first_start < ?", satAdd(rs.until, runSpan), rs.until)
	}
	if hasCur {
		w.add("r.last_start < ? AND r.first_start <= ?", satAdd(cur.t, runSpan), cur.t)
	}
	return rs
}

// sessionRunProcesses returns the processes of the runs whose col
// (audit_id or claimed_audit_id) is auditID, oldest first, at most need
// of them. Runs are read by last start, oldest first, and only while one
// may hold a process older than the need-th found: a run's starts span
// less than runSpan, so a runaway session's millions are not all read.
func (s *Store) sessionRunProcesses(ctx context.Context, tx *sql.Tx, col, auditID string, need int) ([]listed, error) {
	st, err := s.readStmt(ctx, tx, sessionRunsSQL(col))
	if err != nil {
		return nil, fmt.Errorf("querying runs of session %s: %w", auditID, err)
	}
	rows, err := st.QueryContext(ctx, auditID)
	if err != nil {
		return nil, fmt.Errorf("querying runs of session %s: %w", auditID, err)
	}
	defer rows.Close()
	get, err := s.prepareRunRead(ctx, tx)
	if err != nil {
		return nil, err
	}
	defer get.Close()
	oldestFirst := func(a, b runHit) int { return newestFirst(listed{pos: b.pos}, listed{pos: a.pos}) }
	var best []runHit
	for rows.Next() {
		r := &runRow{}
		var last int64
		if err := rows.Scan(&r.id, &last); err != nil {
			return nil, fmt.Errorf("reading run of session %s: %w", auditID, err)
		}
		if len(best) == need && satAdd(last, -runSpan) > best[need-1].pos.t {
			break // its first start is later than every process kept
		}
		body, err := get.read(ctx, r)
		if err != nil {
			return nil, err
		}
		lines, err := runLines(body)
		if err != nil {
			return nil, fmt.Errorf("reading run %d: %w", r.id, err)
		}
		for _, line := range lines {
			start, _, seq, ok := entryHead(line)
			if !ok {
				return nil, fmt.Errorf("reading run %d: a line without its head", r.id)
			}
			h := runHit{pos: cursor{t: start, id: entryID(r.id, seq)}, line: line, run: r}
			if i, _ := slices.BinarySearchFunc(best, h, oldestFirst); i < need {
				best = slices.Insert(best, i, h)[:min(len(best)+1, need)]
			}
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading runs of session %s: %w", auditID, err)
	}
	return decodeHits(best)
}

// runRead reads a run's columns and body by id, in a read transaction.
type runRead struct {
	*sql.Stmt
	args []any // bound after the id
}

// sessionRunsSQL selects the runs whose col is a session's audit ID.
func sessionRunsSQL(col string) string {
	return `SELECT r.id, r.last_start FROM process_runs r WHERE r.` + col + ` = ? AND r.` + col +
		` != '' ORDER BY r.last_start, r.id`
}

// runReadSQL reads a run by id.
const runReadSQL = `SELECT ` + runCols + `, body FROM process_runs WHERE id = ?`

func (s *Store) prepareRunRead(ctx context.Context, tx *sql.Tx) (runRead, error) {
	st, err := s.readStmt(ctx, tx, runReadSQL)
	if err != nil {
		return runRead{}, fmt.Errorf("preparing run read: %w", err)
	}
	return runRead{Stmt: st}, nil
}

// read fills r's key from its row and returns its body, which the caller
// must not modify. The driver hands a TEXT column over as a string, and
// scanning that into a []byte copied it again: a command search read some
// fifty bodies of 7 KiB twice, 1.4 of its 2 MB allocated (make soak's
// agent collected twice a second). Viewing the string's bytes keeps one
// copy; the lines kept from it hold it alive.
func (g runRead) read(ctx context.Context, r *runRow) ([]byte, error) {
	var body string
	if err := g.QueryRowContext(ctx, append([]any{r.id}, g.args...)...).Scan(append(r.key.scanArgs(), &body)...); err != nil {
		return nil, fmt.Errorf("reading run %d: %w", r.id, err)
	}
	return unsafe.Slice(unsafe.StringData(body), len(body)), nil
}

// runColsOf is runCols, each column of table alias a.
func runColsOf(a string) string {
	return a + "." + strings.ReplaceAll(runCols, ", ", ", "+a+".")
}

// satAdd is a+b, held at the int64 bounds (a cursor's time is a client's).
func satAdd(a, b int64) int64 {
	switch {
	case b > 0 && a > math.MaxInt64-b:
		return math.MaxInt64
	case b < 0 && a < math.MinInt64-b:
		return math.MinInt64
	}
	return a + b
}
