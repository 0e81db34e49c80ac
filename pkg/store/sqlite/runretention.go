package sqlite

import (
	"context"
	"fmt"

	"github.com/execid/correlator/pkg/store"
)

// deleteRunProcesses removes, a chunk of runs per transaction, the runs'
// processes that exited before cut: a run all of whose did is deleted,
// one holding others is rewritten without them. It walks
// process_runs_first from the oldest as far as cut (a process that
// exited before cut started before it).
func (s *Store) deleteRunProcesses(ctx context.Context, cut int64, d *store.Deleted) error {
	return walkChunks(&d.Processes, func(after cursor) (int64, cursor, bool, error) {
		return s.deleteRunChunk(ctx, cut, after)
	})
}

func (s *Store) deleteRunChunk(ctx context.Context, cut int64, after cursor) (deleted int64, last cursor, more bool, err error) {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return 0, after, false, fmt.Errorf("beginning retention transaction: %w", err)
	}
	defer tx.Rollback()
	rows, err := tx.QueryContext(ctx, `SELECT id, first_start, body FROM process_runs
		WHERE first_start < ? AND (first_start, id) > (?, ?) ORDER BY first_start, id LIMIT ?`,
		cut, after.t, after.id, s.cfg.DeleteChunk)
	if err != nil {
		return 0, after, false, fmt.Errorf("selecting runs started before the cut: %w", err)
	}
	type run struct {
		id   int64
		body []byte
	}
	var runs []run
	last = after
	bytes, full := 0, false
	for !full && rows.Next() {
		var r run
		if err := rows.Scan(&r.id, &last.t, &r.body); err != nil {
			rows.Close()
			return 0, after, false, fmt.Errorf("reading run started before the cut: %w", err)
		}
		last.id = r.id
		runs = append(runs, r)
		// A chunk's bodies are held at once: bound them, or a backlog's
		// 5,000 runs of a thousand lines would be a spike of the agent's
		// memory (make soak judges its ceiling).
		bytes += len(r.body)
		full = bytes >= maxRetentionChunkBytes
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, after, false, fmt.Errorf("reading runs started before the cut: %w", err)
	}
	for _, r := range runs {
		dropped, err := rewriteRun(ctx, tx, r.id, r.body, func(e *runEntryKey) bool { return e.ExitNs >= cut })
		if err != nil {
			return 0, after, false, err
		}
		if err := deleteRunKeys(ctx, tx, dropped); err != nil {
			return 0, after, false, err
		}
		deleted += int64(len(dropped))
	}
	if err := tx.Commit(); err != nil {
		return 0, after, false, fmt.Errorf("committing retention transaction: %w", err)
	}
	return deleted, last, full || len(runs) == s.cfg.DeleteChunk, nil
}

// maxRetentionChunkBytes bounds the run bodies one retention transaction
// reads.
const maxRetentionChunkBytes = 4 << 20
