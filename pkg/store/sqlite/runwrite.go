package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"

	"github.com/execid/correlator/pkg/join"
)

const (
	insertRunSQL = `INSERT INTO process_runs (` + runCols + `, first_start, last_start, last_exit, n, body)
	VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?) RETURNING id`
	// The keys are bound as one JSON array of IDs, not two values a key:
	// a statement whatever the run's size.
	insertRunKeysSQL = `INSERT OR REPLACE INTO process_run_keys (process_id, run)
	SELECT value, ? FROM json_each(?)`
	// insertRunCommandsSQL lists a run's distinct commands, one JSON array,
	// with its last start.
	insertRunCommandsSQL = `INSERT OR IGNORE INTO process_run_commands (command_id, run, last_start)
	SELECT value, ?, ? FROM json_each(?) WHERE value != 0`
	// storedKeysSQL finds which of a JSON array of IDs are stored, and
	// where: a run's id, or 0 for a processes row.
	storedKeysSQL = `SELECT k.process_id, k.run FROM json_each(?1) j CROSS JOIN process_run_keys k
		ON k.process_id = j.value
	UNION ALL SELECT p.process_id, 0 FROM json_each(?1) j CROSS JOIN processes p ON p.process_id = j.value`
)

// runQueries are the statements writing runs takes, prepared with the
// batch's others (batchQueries).
var runQueries = []string{insertRunSQL, insertRunKeysSQL, insertRunCommandsSQL, storedKeysSQL}

// jsonIDs is a JSON array of n IDs, id(i) the i-th.
func jsonIDs(n int, id func(i int) string) string {
	b := make([]byte, 0, 2+n*24)
	b = append(b, '[')
	for i := range n {
		if i > 0 {
			b = append(b, ',')
		}
		b = jsonString(b, id(i))
	}
	return string(append(b, ']'))
}

// writeProcesses stores whole process rows: the runnable ones new to the
// store in runs, the others in processes. A process stored in a run
// leaves it first; one stored in processes stays there.
func (s *Store) writeProcesses(ctx context.Context, ts *txStmts, cmds *txCommands, procs []join.Process) error {
	if len(procs) == 0 {
		return nil
	}
	if s.noRuns {
		return writeProcessRows(ctx, ts, cmds, procs)
	}
	procs = lastOfEach(procs)
	inRun, inRows, err := storedKeys(ctx, ts, procs)
	if err != nil {
		return err
	}
	if err := leaveRuns(ctx, ts, inRun); err != nil {
		return err
	}
	var rows []join.Process
	runs := map[runKey][]*join.Process{}
	var order []runKey
	for i := range procs {
		p := &procs[i]
		if !runnable(p) || inRows[p.ProcessID] {
			rows = append(rows, *p)
			continue
		}
		k := runKeyOf(p)
		if _, ok := runs[k]; !ok {
			order = append(order, k)
		}
		runs[k] = append(runs[k], p)
	}
	if err := writeProcessRows(ctx, ts, cmds, rows); err != nil {
		return err
	}
	for _, k := range order {
		ps := runs[k]
		sortRun(ps)
		for lo := 0; lo < len(ps); lo += maxRunEntries {
			if err := insertRun(ctx, ts, cmds, k, ps[lo:min(lo+maxRunEntries, len(ps))]); err != nil {
				return err
			}
		}
	}
	return nil
}

// storedKeys looks procs up among the stored processes: the runs holding
// some (run id to their IDs), and the IDs processes rows hold.
func storedKeys(ctx context.Context, ts *txStmts, procs []join.Process) (map[int64][]string, map[string]bool, error) {
	inRun, inRows := map[int64][]string{}, map[string]bool{}
	st, err := ts.get(storedKeysSQL)
	if err != nil {
		return nil, nil, fmt.Errorf("preparing stored process lookup: %w", err)
	}
	rows, err := st.QueryContext(ctx, jsonIDs(len(procs), func(i int) string { return procs[i].ProcessID }))
	if err != nil {
		return nil, nil, fmt.Errorf("looking up stored processes: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var run int64
		if err := rows.Scan(&id, &run); err != nil {
			return nil, nil, fmt.Errorf("reading stored process: %w", err)
		}
		if run == 0 {
			inRows[id] = true
		} else {
			inRun[run] = append(inRun[run], id)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("looking up stored processes: %w", err)
	}
	return inRun, inRows, nil
}

// leaveRuns takes processes out of the runs holding them: each run is
// rewritten without them (its bounds read again from what is left), or
// deleted when nothing is, and their keys are deleted.
func leaveRuns(ctx context.Context, ts *txStmts, inRun map[int64][]string) error {
	for run, ids := range inRun {
		var body string
		if err := ts.tx.QueryRowContext(ctx, `SELECT body FROM process_runs WHERE id = ?`, run).Scan(&body); err != nil {
			return fmt.Errorf("reading run %d: %w", run, err)
		}
		drop := map[string]bool{}
		for _, id := range ids {
			drop[id] = true
		}
		dropped, err := rewriteRun(ctx, ts.tx, run, []byte(body), func(e *runEntryKey) bool { return !drop[e.ProcessID] })
		if err != nil {
			return err
		}
		if err := deleteRunKeys(ctx, ts.tx, dropped); err != nil {
			return err
		}
	}
	return nil
}

// rewriteRun keeps the processes of run (whose body is body) that keep
// says to, with the run's bounds and count, deleting the run when none is
// kept; it returns the IDs of those it dropped, whose keys are the
// caller's to delete.
func rewriteRun(ctx context.Context, tx *sql.Tx, run int64, body []byte, keep func(*runEntryKey) bool) ([]string, error) {
	lines, err := runLines(body)
	if err != nil {
		return nil, fmt.Errorf("reading run %d: %w", run, err)
	}
	kept := lines[:0]
	var dropped []string
	var first, last, lastExit int64
	for _, line := range lines {
		var e runEntryKey
		if err := unmarshalJSON(line, &e); err != nil {
			return nil, fmt.Errorf("decoding process of run %d: %w", run, err)
		}
		if !keep(&e) {
			dropped = append(dropped, e.ProcessID)
			continue
		}
		st, ex := e.StartNs, e.ExitNs
		if len(kept) == 0 || st < first {
			first = st
		}
		last, lastExit = max(last, st), max(lastExit, ex)
		kept = append(kept, line)
	}
	switch {
	case len(dropped) == 0:
		return nil, nil
	case len(kept) == 0:
		_, err = tx.ExecContext(ctx, `DELETE FROM process_runs WHERE id = ?`, run)
	default:
		_, err = tx.ExecContext(ctx, `UPDATE process_runs SET first_start = ?, last_start = ?, last_exit = ?,
			n = ?, body = ? WHERE id = ?`, first, last, lastExit, len(kept), bindText(runBody(kept)), run)
	}
	if err != nil {
		return nil, fmt.Errorf("rewriting run %d: %w", run, err)
	}
	return dropped, nil
}

// insertRun stores ps, oldest first and at most maxRunEntries of them, as
// one run of k, and maps their IDs to it.
func insertRun(ctx context.Context, ts *txStmts, cmds *txCommands, k runKey, ps []*join.Process) error {
	k = k.withDefaults(ps[0])
	ids, err := cmds.ids(ctx, len(ps), func(i int) ([]string, int64) { return ps[i].Argv, nanos(ps[i].Start) }, nil)
	if err != nil {
		return err
	}
	// The lines go straight into the body (runBody's form): built a
	// line at a time and then joined, each line grew from nothing and the
	// whole was copied once more, a seventh of what the soak's agent
	// allocated.
	body := append(make([]byte, 0, runBodyGuess*len(ps)), runOpen...)
	var lastExit int64
	for i, p := range ps {
		if i > 0 {
			body = append(body, runSep...)
		}
		if body, err = appendRunEntry(body, p, ids[i], i, &k); err != nil {
			return fmt.Errorf("encoding process %s: %w", p.ProcessID, err)
		}
		lastExit = max(lastExit, nanos(p.Exit))
	}
	body = append(body, runClose...)
	ins, err := ts.get(insertRunSQL)
	if err != nil {
		return fmt.Errorf("preparing run insert: %w", err)
	}
	var run int64
	args := append(k.args(), nanos(ps[0].Start), nanos(ps[len(ps)-1].Start), lastExit, len(ps), bindText(body))
	if err := ins.QueryRowContext(ctx, args...).Scan(&run); err != nil {
		return fmt.Errorf("inserting run of session %s: %w", k.auditID, err)
	}
	keys, err := ts.get(insertRunKeysSQL)
	if err != nil {
		return fmt.Errorf("preparing run key insert: %w", err)
	}
	if _, err := keys.ExecContext(ctx, run, jsonIDs(len(ps), func(i int) string { return ps[i].ProcessID })); err != nil {
		return fmt.Errorf("mapping processes to run %d: %w", run, err)
	}
	cmdsIns, err := ts.get(insertRunCommandsSQL)
	if err != nil {
		return fmt.Errorf("preparing run command insert: %w", err)
	}
	if _, err := cmdsIns.ExecContext(ctx, run, nanos(ps[len(ps)-1].Start), commandList(ids)); err != nil {
		return fmt.Errorf("listing the commands of run %d: %w", run, err)
	}
	return nil
}

// commandList is a JSON array of ids' distinct values.
func commandList(ids []int64) string {
	seen := make(map[int64]bool, 4)
	b := []byte{'['}
	for _, id := range ids {
		if seen[id] {
			continue
		}
		seen[id] = true
		if len(b) > 1 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, id, 10)
	}
	return string(append(b, ']'))
}

// lastOfEach is procs with each ID's last row alone, in order: a batch
// may name a process twice, and the last row is the one stored.
func lastOfEach(procs []join.Process) []join.Process {
	last := make(map[string]int, len(procs))
	for i := range procs {
		last[procs[i].ProcessID] = i
	}
	if len(last) == len(procs) {
		return procs
	}
	out := make([]join.Process, 0, len(last))
	for i := range procs {
		if last[procs[i].ProcessID] == i {
			out = append(out, procs[i])
		}
	}
	return out
}

// deleteRunKeys deletes the keys of processes no run holds any more.
func deleteRunKeys(ctx context.Context, tx *sql.Tx, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM process_run_keys WHERE process_id IN (SELECT value FROM json_each(?))`,
		jsonIDs(len(ids), func(i int) string { return ids[i] })); err != nil {
		return fmt.Errorf("deleting the keys of %d processes: %w", len(ids), err)
	}
	return nil
}
