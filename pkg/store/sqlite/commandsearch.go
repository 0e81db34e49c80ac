package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"sync"
)

// A command search matched every distinct command line in the store
// against its substring each time: make soak's "/bin/sleep 5", asked
// every 8 s, read some 3,000 lines (every session's root line is its own)
// for a third of the search's CPU. A command's line never changes and no
// id names two commands (retention keeps the newest row, so SQLite's next
// rowid is past every id it deleted), so the store remembers, for the
// substrings searched lately, the ids that matched and the largest id it
// read: the next search matches only the lines stored since, and reads
// the spans of those it knows by id, from commands_span (version 14)
// rather than their rows, one leaf page each (230 page reads for make
// soak's search after each commit). A deleted command drops out there.
// Their lines were matched again until then, against an older agent's
// retention, which pruned the newest row too; no build that did can open
// a version-14 file.

// lineSearch is what a search for one substring learned.
type lineSearch struct {
	ids  []int64 // the commands whose line holds it, ascending
	read int64   // the largest command id matched against it
}

// maxLineSearches bounds the substrings remembered; past it the cache
// starts over. maxLineSearchIDs bounds the ids one keeps: a substring
// in more lines is matched in full each time.
const (
	maxLineSearches  = 64
	maxLineSearchIDs = 4096
)

// lineSearches is the store's memory of recent command searches.
type lineSearches struct {
	mu sync.Mutex
	m  map[string]lineSearch
}

func (c *lineSearches) get(sub string) lineSearch {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[sub]
}

// put keeps ls for sub unless a search that read further is kept: two
// searches at once each keep a state some snapshot held.
func (c *lineSearches) put(sub string, ls lineSearch) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.m[sub]; ok && old.read > ls.read {
		return
	}
	if c.m == nil || len(c.m) >= maxLineSearches {
		c.m = map[string]lineSearch{}
	}
	c.m[sub] = ls
}

func (c *lineSearches) forget(sub string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, sub)
}

var (
	// matchCommandsSQL selects every command whose line holds a substring.
	matchCommandsSQL = `SELECT id, first_start, last_start FROM commands WHERE ` + holdsBytes("line")
	// commandsMaxSQL is the largest command id stored.
	commandsMaxSQL = `SELECT coalesce(max(id), 0) FROM commands`
	// matchNewCommandsSQL selects the commands in an id range whose line
	// holds a substring.
	matchNewCommandsSQL = `SELECT id FROM commands WHERE id > ? AND id <= ? AND ` + holdsBytes("line") + ` ORDER BY id`
	// commandSpansSQL reads the spans of commands named by a JSON array of
	// ids, those still stored, ascending, from their index.
	commandSpansSQL = `SELECT c.id, c.first_start, c.last_start FROM json_each(?) j
	CROSS JOIN commands c INDEXED BY commands_span ON c.id = j.value ORDER BY c.id`
)

// matchCommands reads the distinct command lines holding sub ("": none
// sought): the ids a search for it matched before and the lines stored
// since, in one snapshot.
func (s *Store) matchCommands(ctx context.Context, sub string) (commandMatch, error) {
	if sub == "" {
		return commandMatch{}, nil
	}
	tx, err := s.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return commandMatch{}, fmt.Errorf("beginning command search: %w", err)
	}
	defer tx.Rollback()
	prev := s.searches.get(sub)
	top, err := s.queryInt(ctx, tx, commandsMaxSQL)
	if err != nil {
		return commandMatch{}, fmt.Errorf("searching command lines: %w", err)
	}
	ids, err := s.newMatches(ctx, tx, sub, min(prev.read, top), top)
	if err != nil {
		return commandMatch{}, err
	}
	ids = append(prev.ids[:len(prev.ids):len(prev.ids)], ids...)
	if len(ids) > maxLineSearchIDs {
		s.searches.forget(sub)
		m, _, err := s.scanCommands(ctx, tx, matchCommandsSQL, sub)
		return m, err
	}
	m, kept, err := s.commandSpans(ctx, tx, ids)
	if err != nil {
		return m, err
	}
	s.searches.put(sub, lineSearch{ids: kept, read: top})
	return m, nil
}

// newMatches selects the commands in (after, upTo] whose line holds sub.
func (s *Store) newMatches(ctx context.Context, tx *sql.Tx, sub string, after, upTo int64) ([]int64, error) {
	if after >= upTo {
		return nil, nil
	}
	st, err := s.readStmt(ctx, tx, matchNewCommandsSQL)
	if err != nil {
		return nil, err
	}
	rows, err := st.QueryContext(ctx, after, upTo, sub)
	if err != nil {
		return nil, fmt.Errorf("searching command lines: %w", err)
	}
	defer rows.Close()
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("reading command line: %w", err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("searching command lines: %w", err)
	}
	return ids, nil
}

// commandSpans reads the spans of ids still stored, returning the match
// and those ids.
func (s *Store) commandSpans(ctx context.Context, tx *sql.Tx, ids []int64) (commandMatch, []int64, error) {
	if len(ids) == 0 {
		return commandMatch{}, nil, nil
	}
	b := append(make([]byte, 0, 8*len(ids)), '[')
	for i, id := range ids {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, id, 10)
	}
	return s.scanCommands(ctx, tx, commandSpansSQL, string(append(b, ']')))
}

// scanCommands runs q, which selects commands' ids and spans in id order,
// and gathers them into a match; ids are every one, in order.
func (s *Store) scanCommands(ctx context.Context, tx *sql.Tx, q string, args ...any) (m commandMatch, ids []int64, err error) {
	st, err := s.readStmt(ctx, tx, q)
	if err != nil {
		return m, nil, err
	}
	rows, err := st.QueryContext(ctx, args...)
	if err != nil {
		return m, nil, fmt.Errorf("searching command lines: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id, first, last int64
		if err := rows.Scan(&id, &first, &last); err != nil {
			return m, nil, fmt.Errorf("reading command line: %w", err)
		}
		m.add(id, first, last)
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		return m, nil, fmt.Errorf("searching command lines: %w", err)
	}
	m.ids = padIDs(m.ids)
	return m, ids, nil
}

// add counts command id, whose processes started within [first, last].
func (m *commandMatch) add(id, first, last int64) {
	if len(m.set) == 0 || first < m.first {
		m.first = first
	}
	if len(m.set) == 0 || last > m.last {
		m.last = last
	}
	if m.set == nil {
		m.set = map[int64]bool{}
	}
	m.set[id] = true
	if len(m.ids) < maxCommandIDs {
		m.ids = append(m.ids, id)
	} else {
		m.all = true
	}
}

// queryInt runs q, which selects one integer, in tx.
func (s *Store) queryInt(ctx context.Context, tx *sql.Tx, q string) (int64, error) {
	st, err := s.readStmt(ctx, tx, q)
	if err != nil {
		return 0, err
	}
	var n int64
	if err := st.QueryRowContext(ctx).Scan(&n); err != nil {
		return 0, err
	}
	return n, nil
}
