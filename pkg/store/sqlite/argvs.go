package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/execid/correlator/pkg/store"
)

// maxCachedArgvs bounds the argvs readers remember; past it the cache
// starts over.
const maxCachedArgvs = 16384

// argvCache is what readers have read of commands, by id: a listing's
// processes name their argvs by id, and a page of make soak's command
// search named about fifty, each read, prepared and decoded again on
// every query (a tenth of its CPU). An id always names the same argv:
// retention keeps the newest row, so SQLite never gives a deleted id to a
// new command (deleteCommandsSQL), and a row's argv never changes.
type argvCache struct {
	mu sync.Mutex
	m  map[int64][]string
}

// get fills argvs with the cached argvs of ids and returns the ids it
// did not hold.
func (c *argvCache) get(ids []int64, argvs map[int64][]string) (missing []int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, id := range ids {
		if argv, ok := c.m[id]; ok {
			argvs[id] = argv
		} else {
			missing = append(missing, id)
		}
	}
	return missing
}

// put remembers argvs read from the store.
func (c *argvCache) put(argvs map[int64][]string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m)+len(argvs) > maxCachedArgvs {
		c.m = make(map[int64][]string, len(argvs))
	}
	for id, argv := range argvs {
		c.m[id] = argv
	}
}

// fillArgvs sets the argv of each run's process, from the cache or else
// from commands, and fills each process (store.FillProcess). Each gets its
// own copy of its argv: the cache's stay as read.
func (s *Store) fillArgvs(ctx context.Context, q queryer, ps []listed) error {
	var ids []int64
	seen := map[int64]bool{}
	for _, l := range ps {
		if l.command != 0 && !seen[l.command] {
			seen[l.command] = true
			ids = append(ids, l.command)
		}
	}
	argvs := make(map[int64][]string, len(ids))
	missing := s.argvs.get(ids, argvs)
	read, err := readArgvs(ctx, q, missing)
	if err != nil {
		return err
	}
	s.argvs.put(read)
	for id, argv := range read {
		argvs[id] = argv
	}
	for i := range ps {
		if ps[i].command != 0 {
			ps[i].p.Argv = slices.Clone(argvs[ps[i].command])
		}
		store.FillProcess(&ps[i].p)
	}
	return nil
}

// readArgvs reads the argvs of ids from commands.
func readArgvs(ctx context.Context, q queryer, ids []int64) (map[int64][]string, error) {
	argvs := make(map[int64][]string, len(ids))
	for lo := 0; lo < len(ids); lo += 500 {
		chunk := ids[lo:min(lo+500, len(ids))]
		args := make([]any, len(chunk))
		for i, id := range chunk {
			args[i] = id
		}
		rows, err := q.QueryContext(ctx, `SELECT id, argv FROM commands WHERE id IN (`+
			strings.TrimSuffix(strings.Repeat("?,", len(chunk)), ",")+`)`, args...)
		if err != nil {
			return nil, fmt.Errorf("querying commands: %w", err)
		}
		for rows.Next() {
			var id int64
			var argv sql.NullString
			var dst []string
			if err := rows.Scan(&id, &argv); err != nil {
				rows.Close()
				return nil, fmt.Errorf("reading command: %w", err)
			}
			if err := decodeJSON(jsonColumn{argv, &dst}); err != nil {
				rows.Close()
				return nil, fmt.Errorf("reading command %d: %w", id, err)
			}
			argvs[id] = dst
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("reading commands: %w", err)
		}
	}
	return argvs, nil
}
