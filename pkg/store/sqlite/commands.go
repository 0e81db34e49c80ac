package sqlite

import (
	"context"
	"database/sql"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"strings"
	"sync"

	"github.com/execid/correlator/pkg/join"
)

// upsertCommandHead and upsertCommandTail make the upsert of n commands
// (upsertCommandSQLs[n]): each argv not stored yet is inserted, a stored
// one's span widened, and every row's id and span returned, with its argv
// to tell them apart.
const (
	upsertCommandHead = `INSERT INTO commands (argv, line, first_start, last_start) VALUES `
	upsertCommandTail = `
ON CONFLICT (argv) DO UPDATE SET first_start = min(first_start, excluded.first_start),
	last_start = max(last_start, excluded.last_start)
RETURNING argv, id, first_start, last_start`
)

var upsertCommandSQLs = func() (sqls [processRowsPerStmt + 1]string) {
	for n := 1; n <= processRowsPerStmt; n++ {
		sqls[n] = upsertCommandHead + strings.TrimSuffix(strings.Repeat("(?,?,?,?),", n), ",") + upsertCommandTail
	}
	return sqls
}()

// spanCommandSQL widens a stored command's span to a process's start.
const spanCommandSQL = `UPDATE commands SET first_start = min(first_start, ?), last_start = max(last_start, ?)
WHERE id = ?`

// maxCachedCommands bounds the argvs the writer remembers; past it the
// cache starts over (each argv then costs one upsert again).
const maxCachedCommands = 16384

// command is a commands row as the writer knows it: its id and the span
// of starts it covers.
type command struct {
	id, first, last int64
}

// argvKey is argv as a map key: each token after its length, so that no
// two argvs share one (a token may hold any byte).
func argvKey(argv []string) string {
	n := 0
	for _, a := range argv {
		n += len(a) + binary.MaxVarintLen64
	}
	b := make([]byte, 0, n)
	for _, a := range argv {
		b = binary.AppendUvarint(b, uint64(len(a)))
		b = append(b, a...)
	}
	return string(b)
}

// commandCache maps an argv (argvKey) to its committed commands row, so
// that most process rows cost a map lookup, not an upsert.
type commandCache struct {
	mu  sync.Mutex
	m   map[string]command
	gen uint64 // resets so far
}

func (c *commandCache) generation() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gen
}

func (c *commandCache) get(key string) (command, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cmd, ok := c.m[key]
	return cmd, ok
}

// merge remembers the rows a transaction begun at generation gen wrote,
// unless a reset came since: retention may have deleted them after the
// transaction committed.
func (c *commandCache) merge(gen uint64, rows map[string]command) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if gen != c.gen {
		return
	}
	if c.m == nil || len(c.m)+len(rows) > maxCachedCommands {
		c.m = make(map[string]command, len(rows))
	}
	for k, v := range rows {
		c.m[k] = v
	}
}

// reset forgets every row: retention is deleting some. It is called
// inside retention's transaction, which holds the only write connection,
// so no write transaction is running.
func (c *commandCache) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.m = nil
	c.gen++
}

// txCommands resolves argvs to commands rows inside one write transaction.
// What it learns reaches the cache only once the transaction commits: a
// rolled back insert leaves no row for a cached id to point to.
type txCommands struct {
	ts     *txStmts
	cache  *commandCache
	gen    uint64             // the cache's when the transaction began
	seen   map[string]command // resolved in this transaction, spans widened here
	stored map[string]command // the same rows as the database holds them
}

func newTxCommands(ts *txStmts, cache *commandCache) *txCommands {
	return &txCommands{ts: ts, cache: cache, gen: cache.generation(), seen: map[string]command{}, stored: map[string]command{}}
}

// argvAt is the i-th argv a write runs, and when: a process's start, or
// the time a session's request was received.
type argvAt func(i int) (argv []string, at int64)

// processArgvs is argvAt over processes.
func processArgvs(procs []join.Process) argvAt {
	return func(i int) ([]string, int64) { return procs[i].Argv, nanos(procs[i].Start) }
}

// ids returns the commands row of each of n argvs (0: an empty one),
// each row's span covering its time. The argvs neither this transaction
// nor the cache knows are upserted together, a statement per
// processRowsPerStmt: a batch of new command lines costs a few statements,
// not one each.
func (t *txCommands) ids(ctx context.Context, n int, at argvAt, ids []int64) ([]int64, error) {
	ids = ids[:0]
	var missing []int // the argvs not known yet
	keys := make([]string, n)
	for i := range n {
		argv, when := at(i)
		if len(argv) == 0 {
			ids = append(ids, 0)
			continue
		}
		keys[i] = argvKey(argv)
		cmd, ok := t.seen[keys[i]]
		if !ok {
			if cmd, ok = t.cache.get(keys[i]); ok {
				t.stored[keys[i]] = cmd
			}
		}
		if !ok {
			missing = append(missing, i)
			ids = append(ids, 0)
			continue
		}
		cmd.first, cmd.last = min(cmd.first, when), max(cmd.last, when)
		t.seen[keys[i]] = cmd
		ids = append(ids, cmd.id)
	}
	if err := t.insert(ctx, at, keys, missing); err != nil {
		return nil, err
	}
	for _, i := range missing {
		ids[i] = t.seen[keys[i]].id // its span, as stored, covers every time among missing
	}
	return ids, nil
}

// insert upserts the distinct argvs among missing, each with the span of
// its times there, and learns their rows.
func (t *txCommands) insert(ctx context.Context, at argvAt, keys []string, missing []int) error {
	type row struct {
		key, argv, line string
		first, last     int64
	}
	var rows []row
	index := map[string]int{}
	for _, i := range missing {
		argv, when := at(i)
		if j, ok := index[keys[i]]; ok {
			rows[j].first, rows[j].last = min(rows[j].first, when), max(rows[j].last, when)
			continue
		}
		b, err := json.Marshal(argv)
		if err != nil {
			return fmt.Errorf("encoding argv: %w", err)
		}
		index[keys[i]] = len(rows)
		rows = append(rows, row{key: keys[i], argv: string(b), line: strings.Join(argv, " "), first: when, last: when})
	}
	byArgv := make(map[string]string, len(rows)) // argv JSON -> key
	for lo := 0; lo < len(rows); lo += processRowsPerStmt {
		chunk := rows[lo:min(lo+processRowsPerStmt, len(rows))]
		up, err := t.ts.get(upsertCommandSQLs[len(chunk)])
		if err != nil {
			return fmt.Errorf("preparing command upsert: %w", err)
		}
		args := make([]any, 0, 4*len(chunk))
		for _, r := range chunk {
			args = append(args, r.argv, r.line, r.first, r.last)
			byArgv[r.argv] = r.key
		}
		if err := t.learn(ctx, up, args, byArgv); err != nil {
			return err
		}
	}
	return nil
}

// learn runs one upsert and records the rows it returns, as stored.
func (t *txCommands) learn(ctx context.Context, up *sql.Stmt, args []any, byArgv map[string]string) error {
	res, err := up.QueryContext(ctx, args...)
	if err != nil {
		return fmt.Errorf("upserting commands: %w", err)
	}
	defer res.Close()
	n := 0
	for res.Next() {
		var argv string
		var cmd command
		if err := res.Scan(&argv, &cmd.id, &cmd.first, &cmd.last); err != nil {
			return fmt.Errorf("reading upserted command: %w", err)
		}
		key, ok := byArgv[argv]
		if !ok {
			return fmt.Errorf("upserting commands: an argv came back that was not written")
		}
		t.seen[key], t.stored[key] = cmd, cmd
		n++
	}
	if err := res.Err(); err != nil {
		return fmt.Errorf("upserting commands: %w", err)
	}
	if want := len(args) / 4; n != want {
		return fmt.Errorf("upserting commands: %d rows came back of %d", n, want)
	}
	return nil
}

// flush writes the spans this transaction widened on rows the cache
// held: once per command, not once per process.
func (t *txCommands) flush(ctx context.Context) error {
	for key, was := range t.stored {
		now := t.seen[key]
		if now.first >= was.first && now.last <= was.last {
			continue
		}
		up, err := t.ts.get(spanCommandSQL)
		if err != nil {
			return fmt.Errorf("preparing command span update: %w", err)
		}
		if _, err := up.ExecContext(ctx, now.first, now.last, now.id); err != nil {
			return fmt.Errorf("widening the span of command %d: %w", now.id, err)
		}
	}
	return nil
}

// committed hands what the transaction wrote to the cache.
func (t *txCommands) committed() {
	if len(t.seen) > 0 {
		t.cache.merge(t.gen, t.seen)
	}
}
