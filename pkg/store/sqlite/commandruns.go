package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// A search for a rare command read its runs' ids and last starts from
// process_runs to sort them, one leaf page a run (a run's body fills its
// page): make soak's "/bin/sleep 5" looked up 230 runs to read the
// newest 51, 430 page reads after each of the writer's commits and most
// of the search's time. process_run_commands now holds each run's last
// start with its commands (version 14), so the runs are sorted from that
// index alone and each is read only when the walk reaches it, its
// filter checked as it is read. The value is the run's last start when
// written; a rewrite only takes processes out, so it bounds the run's
// last start from above, which is all the walk's stop needs.

// runBound is a run listing a searched command, and a bound from above
// on its last start.
type runBound struct{ run, last int64 }

// commandRuns reads, up to limit, the runs that list one of m's commands,
// newest bound first; few reports that fewer than limit do (else the runs
// are walked in page order).
func commandRuns(ctx context.Context, q queryer, m commandMatch, limit int) (runs []runBound, few bool, err error) {
	query := commandRunsSQL(m)
	if query == "" {
		return nil, false, nil
	}
	rows, err := q.QueryContext(ctx, query, append(slices.Clone(m.ids), limit)...)
	if err != nil {
		return nil, false, fmt.Errorf("listing the runs of %d commands: %w", len(m.ids), err)
	}
	defer rows.Close()
	for rows.Next() {
		var b runBound
		if err := rows.Scan(&b.run, &b.last); err != nil {
			return nil, false, fmt.Errorf("listing the runs of %d commands: %w", len(m.ids), err)
		}
		runs = append(runs, b)
	}
	if err := rows.Err(); err != nil {
		return nil, false, fmt.Errorf("listing the runs of %d commands: %w", len(m.ids), err)
	}
	if len(runs) >= limit {
		return nil, false, nil
	}
	// A run listing two of the commands is there twice, with one bound.
	slices.SortFunc(runs, func(a, b runBound) int { return cmp.Or(cmp.Compare(b.last, a.last), cmp.Compare(b.run, a.run)) })
	return slices.CompactFunc(runs, func(a, b runBound) bool { return a.run == b.run }), true, nil
}

// commandRunsSQL selects, up to a bound, the runs that list one of m's
// commands with their bounds; "": m names none (too many, or none matched).
func commandRunsSQL(m commandMatch) string {
	if len(m.ids) == 0 || m.all {
		return ""
	}
	return `SELECT run, last_start FROM process_run_commands WHERE command_id IN (` +
		strings.TrimSuffix(strings.Repeat("?,", len(m.ids)), ",") + `) LIMIT ?`
}

// readQuery reads one of rs.runs by id, with its columns and body, if it
// passes the search's filter.
func (rs *runSearch) readQuery() string {
	q := `SELECT ` + runColsOf("r") + `, r.body FROM process_runs r WHERE r.id = ?`
	if len(rs.where.conds) > 0 {
		q += ` AND ` + strings.Join(rs.where.conds, " AND ")
	}
	return q
}

// errRunFiltered: a run read by id does not pass the search's filter.
var errRunFiltered = errors.New("run filtered out")

// runSource yields the runs a search reads, newest last start first, each
// with a bound on its last start, and reads their bodies.
type runSource struct {
	rows *sql.Rows // walked in page order; nil: listed
	runs []runBound
	get  runRead
}

func (s *Store) openRuns(ctx context.Context, tx *sql.Tx, rs *runSearch) (*runSource, error) {
	if rs.listed {
		st, err := listTx{s, tx}.stmt(ctx, rs.readQuery())
		if err != nil {
			return nil, fmt.Errorf("preparing run read: %w", err)
		}
		return &runSource{runs: rs.runs, get: runRead{st, rs.where.args}}, nil
	}
	rows, err := listTx{s, tx}.QueryContext(ctx, rs.query(), rs.where.args...)
	if err != nil {
		return nil, fmt.Errorf("querying process runs: %w", err)
	}
	get, err := s.prepareRunRead(ctx, tx)
	if err != nil {
		rows.Close()
		return nil, err
	}
	return &runSource{rows: rows, get: get}, nil
}

// next fills r's id and returns its bound; ok is false past the last.
func (src *runSource) next(r *runRow) (last int64, ok bool, err error) {
	if src.rows == nil {
		if len(src.runs) == 0 {
			return 0, false, nil
		}
		b := src.runs[0]
		src.runs = src.runs[1:]
		r.id = b.run
		return b.last, true, nil
	}
	if !src.rows.Next() {
		if err := src.rows.Err(); err != nil {
			return 0, false, fmt.Errorf("reading process runs: %w", err)
		}
		return 0, false, nil
	}
	if err := src.rows.Scan(&r.id, &last); err != nil {
		return 0, false, fmt.Errorf("reading process run: %w", err)
	}
	return last, true, nil
}

// read reads r's key and body (runRead.read); errRunFiltered: a listed
// run the filter leaves out.
func (src *runSource) read(ctx context.Context, r *runRow) ([]byte, error) {
	body, err := src.get.read(ctx, r)
	if src.rows == nil && errors.Is(err, sql.ErrNoRows) {
		return nil, errRunFiltered
	}
	return body, err
}

func (src *runSource) close() {
	if src.rows != nil {
		src.rows.Close()
	}
	src.get.Close()
}
