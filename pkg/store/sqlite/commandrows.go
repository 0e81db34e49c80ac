package sqlite

import (
	"cmp"
	"context"
	"fmt"

	"github.com/execid/correlator/pkg/store"
)

// A command search walked a pod's processes rows newest first, looking
// each row up in the table for its command: make soak's "/bin/sleep 5",
// run in one row of ten, read about a thousand rows of a pod's 1,828 on an
// hour's store for a page of 100, three quarters of the search's 4.9 ms.
// processes_command (version 15) holds each row's command, pod and start,
// so that a search reads its commands' rows alone and sorts them. The walk
// still wins where most rows ran the commands: the search counts, up to
// Config.CommandRows, the rows the index names, and walks past that many.

// fewCommandRows counts, up to Config.CommandRows, the processes rows of
// cmds' commands (in f's pod, if it names one); few reports that there are
// fewer, so that a listing reads them by processes_command and sorts them.
func (s *Store) fewCommandRows(ctx context.Context, f store.ProcessFilter, cmds commandMatch) (n int, few bool, err error) {
	if f.Command == "" || cmds.all || len(cmds.ids) == 0 {
		return 0, false, nil
	}
	ids := make([]int64, len(cmds.ids))
	for i, id := range cmds.ids {
		ids[i] = id.(int64)
	}
	q, args := commandRowsSQL(f, jsonInts(ids), s.cfg.CommandRows)
	rows, err := s.listQuery(ctx, q, args...)
	if err != nil {
		return 0, false, fmt.Errorf("counting the rows of %d commands: %w", len(cmds.ids), err)
	}
	defer rows.Close()
	if rows.Next() {
		err = rows.Scan(&n)
	}
	if err = cmp.Or(err, rows.Err()); err != nil {
		return 0, false, fmt.Errorf("counting the rows of %d commands: %w", len(cmds.ids), err)
	}
	return n, n < s.cfg.CommandRows, nil
}

// commandRowsSQL counts, up to limit, the rows of the commands in the JSON
// array ids in f's pod, from processes_command alone.
func commandRowsSQL(f store.ProcessFilter, ids string, limit int) (string, []any) {
	q := `SELECT count(*) FROM (SELECT 1 FROM processes INDEXED BY processes_command
		WHERE command_id IN (SELECT value FROM json_each(?))`
	args := []any{ids}
	if f.Pod != "" {
		q += ` AND pod = ?`
		args = append(args, f.Pod)
	}
	return q + ` LIMIT ?)`, append(args, limit)
}
