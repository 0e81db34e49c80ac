package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"time"

	"github.com/execid/correlator/pkg/store"
)

// DeleteOlderThan removes what stopped mattering before t:
//   - processes that exited before t (running processes stay, however old);
//   - sessions that ended before t (or, never seen to end, were received
//     before t) and have no process left, with their audit records, so a
//     long-running process never loses the user who started it;
//   - audit records before t that belong to no session;
//   - alerts before t.
//
// It deletes in transactions of Config.DeleteChunk rows, so writers wait
// for one chunk at most.
func (s *Store) DeleteOlderThan(ctx context.Context, t time.Time) (store.Deleted, error) {
	var d store.Deleted
	cut := t.UnixNano()
	steps := []struct {
		name string
		n    *int64
		sql  string
	}{
		{"orphan audit records", &d.AuditRecords, `DELETE FROM audit_records WHERE (audit_id, stage, request_key) IN (
			SELECT a.audit_id, a.stage, a.request_key FROM audit_records a WHERE a.stage_timestamp < ?
			AND NOT EXISTS (SELECT 1 FROM sessions s WHERE s.audit_id = a.audit_id) LIMIT ?)`},
		{"alerts", &d.Alerts, `DELETE FROM alerts WHERE seq IN (
			SELECT seq FROM alerts WHERE time < ? LIMIT ?)`},
	}
	// Sessions go after their processes and before orphaned records.
	if err := s.deleteProcesses(ctx, cut, &d); err != nil {
		return d, fmt.Errorf("deleting processes that exited before %s: %w", t.Format(time.RFC3339), err)
	}
	if err := s.deleteRunProcesses(ctx, cut, &d); err != nil {
		return d, fmt.Errorf("deleting run processes that exited before %s: %w", t.Format(time.RFC3339), err)
	}
	if err := s.deleteSessions(ctx, cut, &d); err != nil {
		return d, fmt.Errorf("deleting sessions older than %s: %w", t.Format(time.RFC3339), err)
	}
	if err := s.deleteCommands(ctx, cut); err != nil {
		return d, fmt.Errorf("deleting commands no process ran since before %s: %w", t.Format(time.RFC3339), err)
	}
	for _, st := range steps {
		for {
			res, err := s.w.ExecContext(ctx, st.sql, cut, s.cfg.DeleteChunk)
			if err != nil {
				return d, fmt.Errorf("deleting %s older than %s: %w", st.name, t.Format(time.RFC3339), err)
			}
			n, err := res.RowsAffected()
			if err != nil {
				return d, fmt.Errorf("counting deleted %s: %w", st.name, err)
			}
			*st.n += n
			if n < int64(s.cfg.DeleteChunk) {
				break
			}
		}
	}
	return d, nil
}

// deleteProcesses removes, a chunk per transaction, the processes that
// exited before cut. It walks processes_start from the oldest, in (start,
// id) order, as far as cut (a process that exited before cut started
// before it): no exit index is written for it, and a process still running
// is passed once, not at every chunk.
func (s *Store) deleteProcesses(ctx context.Context, cut int64, d *store.Deleted) error {
	return walkChunks(&d.Processes, func(after cursor) (int64, cursor, bool, error) {
		return s.deleteProcessChunk(ctx, cut, after)
	})
}

// walkChunks runs chunk from the oldest position, then from the last one
// each returns while it says more may follow, adding what each deleted
// to n.
func walkChunks(n *int64, chunk func(after cursor) (deleted int64, last cursor, more bool, err error)) error {
	after := cursor{t: math.MinInt64, id: math.MinInt64}
	for {
		k, last, more, err := chunk(after)
		if err != nil {
			return err
		}
		*n += k
		if !more {
			return nil
		}
		after = last
	}
}

// processesBeforeSQL is the next chunk of processes started before a cut,
// after a (start, id) position, in that order.
const processesBeforeSQL = `SELECT id, start, exit_time FROM processes
	WHERE start < ? AND (start, id) > (?, ?) ORDER BY start, id LIMIT ?`

// deleteProcessChunk deletes the exited processes among the next
// DeleteChunk that started before cut after position after; it returns
// how many it deleted, the last position walked, and whether more may
// follow.
func (s *Store) deleteProcessChunk(ctx context.Context, cut int64, after cursor) (deleted int64, last cursor, more bool, err error) {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return 0, after, false, fmt.Errorf("beginning retention transaction: %w", err)
	}
	defer tx.Rollback()
	rows, err := tx.QueryContext(ctx, processesBeforeSQL, cut, after.t, after.id, s.cfg.DeleteChunk)
	if err != nil {
		return 0, after, false, fmt.Errorf("selecting processes started before the cut: %w", err)
	}
	var ids []int64
	walked := 0
	last = after
	for rows.Next() {
		var exit sql.NullInt64
		if err := rows.Scan(&last.id, &last.t, &exit); err != nil {
			rows.Close()
			return 0, after, false, fmt.Errorf("reading process started before the cut: %w", err)
		}
		walked++
		if exit.Valid && exit.Int64 < cut {
			ids = append(ids, last.id)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, after, false, fmt.Errorf("reading processes started before the cut: %w", err)
	}
	del, err := tx.PrepareContext(ctx, `DELETE FROM processes WHERE id = ?`)
	if err != nil {
		return 0, after, false, fmt.Errorf("preparing process delete: %w", err)
	}
	defer del.Close()
	for _, id := range ids {
		if _, err := del.ExecContext(ctx, id); err != nil {
			return 0, after, false, fmt.Errorf("deleting process row %d: %w", id, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return 0, after, false, fmt.Errorf("committing retention transaction: %w", err)
	}
	return int64(len(ids)), last, walked == s.cfg.DeleteChunk, nil
}

// deleteCommandsSQL picks a chunk of commands whose span ended before the
// cut and that no process points to and no session asked for any more
// (each looked for within the span, on its time index). A run whose
// processes' starts overlap the span keeps it, whether or not one ran
// it: after deleteRunProcesses few runs start before the cut. The newest
// row stays, so that SQLite never gives a deleted id to a new command: a
// command search remembers which ids matched (lineSearches).
const deleteCommandsSQL = `DELETE FROM commands WHERE id IN (SELECT c.id FROM commands c WHERE c.last_start < ?
	AND c.id < (SELECT max(id) FROM commands)
	AND NOT EXISTS (SELECT 1 FROM processes p WHERE p.start BETWEEN c.first_start AND c.last_start
		AND p.command_id = c.id)
	AND NOT EXISTS (SELECT 1 FROM sessions s WHERE s.request_received BETWEEN c.first_start AND c.last_start
		AND s.command = c.argv)
	AND NOT EXISTS (SELECT 1 FROM process_runs r WHERE r.first_start <= c.last_start
		AND r.last_start >= c.first_start) LIMIT ?)`

// deleteCommands removes, a chunk per transaction, the commands rows no
// process or session needs any more. The writer's cache forgets every row inside each
// transaction, while it holds the only write connection: no write can
// take a deleted id from it afterwards.
func (s *Store) deleteCommands(ctx context.Context, cut int64) error {
	for {
		n, err := s.deleteCommandChunk(ctx, cut)
		if err != nil || n < int64(s.cfg.DeleteChunk) {
			return err
		}
	}
}

func (s *Store) deleteCommandChunk(ctx context.Context, cut int64) (int64, error) {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("beginning retention transaction: %w", err)
	}
	defer tx.Rollback()
	res, err := tx.ExecContext(ctx, deleteCommandsSQL, cut, s.cfg.DeleteChunk)
	if err != nil {
		return 0, err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("counting deleted commands: %w", err)
	}
	if n > 0 {
		s.commands.reset()
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("committing retention transaction: %w", err)
	}
	return n, nil
}

// deleteSessions removes, a chunk per transaction, the sessions that
// ended before cut and have no process left, with their user and group rows
// and audit records.
func (s *Store) deleteSessions(ctx context.Context, cut int64, d *store.Deleted) error {
	for {
		n, recs, err := s.deleteSessionChunk(ctx, cut)
		if err != nil {
			return err
		}
		d.Sessions += n
		d.AuditRecords += recs
		if n < int64(s.cfg.DeleteChunk) {
			return nil
		}
	}
}

func (s *Store) deleteSessionChunk(ctx context.Context, cut int64) (sessions, records int64, err error) {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return 0, 0, fmt.Errorf("beginning retention transaction: %w", err)
	}
	defer tx.Rollback()
	rows, err := tx.QueryContext(ctx, `SELECT s.id, s.audit_id FROM sessions s
		WHERE coalesce(s.end_time, s.request_received) < ?
		AND NOT EXISTS (SELECT 1 FROM processes p WHERE p.audit_id = s.audit_id)
		AND NOT EXISTS (SELECT 1 FROM process_runs r WHERE r.audit_id = s.audit_id) LIMIT ?`,
		cut, s.cfg.DeleteChunk)
	if err != nil {
		return 0, 0, fmt.Errorf("selecting expired sessions: %w", err)
	}
	type key struct {
		id      int64
		auditID string
	}
	var keys []key
	for rows.Next() {
		var k key
		if err := rows.Scan(&k.id, &k.auditID); err != nil {
			rows.Close()
			return 0, 0, fmt.Errorf("reading expired session: %w", err)
		}
		keys = append(keys, k)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, 0, fmt.Errorf("reading expired sessions: %w", err)
	}
	for _, k := range keys {
		for _, q := range []string{`DELETE FROM session_users WHERE session_id = ?`,
			`DELETE FROM session_groups WHERE session_id = ?`} {
			if _, err := tx.ExecContext(ctx, q, k.id); err != nil {
				return 0, 0, fmt.Errorf("deleting users and groups of session %s: %w", k.auditID, err)
			}
		}
		res, err := tx.ExecContext(ctx, `DELETE FROM audit_records WHERE audit_id = ?`, k.auditID)
		if err != nil {
			return 0, 0, fmt.Errorf("deleting audit records of session %s: %w", k.auditID, err)
		}
		n, _ := res.RowsAffected()
		records += n
		if _, err := tx.ExecContext(ctx, `DELETE FROM sessions WHERE id = ?`, k.id); err != nil {
			return 0, 0, fmt.Errorf("deleting session %s: %w", k.auditID, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return 0, 0, fmt.Errorf("committing retention transaction: %w", err)
	}
	return int64(len(keys)), records, nil
}

// retentionSpread spreads the node's passes over a fifth of their interval
// (store.RunRetention): a pass holds a CPU for a third of a second in the
// soak, and at one phase it would meet every query a periodic client makes,
// or none.
const retentionSpread = 0.2

// RunRetention deletes what is older than maxAge every interval until ctx
// is done, logging each pass that deleted something, and hands SQLite's
// freed memory back every Config.TrimInterval. It returns ctx's error.
func (s *Store) RunRetention(ctx context.Context, maxAge, interval time.Duration) error {
	tctx, cancel := context.WithCancel(ctx)
	trimmed := make(chan struct{})
	go func() {
		defer close(trimmed)
		s.trimEvery(tctx)
	}()
	defer func() { cancel(); <-trimmed }()
	return store.RunRetention(ctx, s, maxAge, interval, retentionSpread, s.log, func(ctx context.Context) error {
		_, err := s.w.ExecContext(ctx, "PRAGMA optimize")
		return err
	})
}

// trimEvery runs trimMemory every Config.TrimInterval until ctx is done.
// It keeps its own ticker: a production retention passes once an hour,
// and what a burst left should not stay that long.
func (s *Store) trimEvery(ctx context.Context) {
	tick := time.NewTicker(s.cfg.TrimInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if err := s.trimMemory(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn().Err(err).Msg("returning SQLite's memory")
		}
	}
}

// trimMemory empties the writer's page cache of the pages no transaction
// holds, then hands what SQLite freed back to the OS (trimCMemory). The
// writer's cache kept every page it had written until it held CacheKiB
// (the readers' are emptied at each commit): the soak's agent grew
// outside the Go heap for its first 40 minutes. The hot pages come back
// from the mapped file at the next write.
func (s *Store) trimMemory(ctx context.Context) error {
	if _, err := s.w.ExecContext(ctx, "PRAGMA shrink_memory"); err != nil {
		return fmt.Errorf("emptying the writer's page cache: %w", err)
	}
	if err := trimCMemory(); err != nil {
		return fmt.Errorf("returning SQLite's freed memory: %w", err)
	}
	return nil
}
