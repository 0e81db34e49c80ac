package sqlite

import (
	"context"
	"encoding/base64"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/execid/correlator/pkg/store"
)

// cursor is a keyset position: the last row's time and id. On the wire it
// is base64url("v1.<time>.<id>"), opaque to clients.
type cursor struct {
	t  int64
	id int64
}

func (c cursor) String() string {
	return base64.RawURLEncoding.EncodeToString([]byte("v1." + strconv.FormatInt(c.t, 10) + "." + strconv.FormatInt(c.id, 10)))
}

// parseCursor decodes a cursor; an empty string is the first page.
func parseCursor(s string) (cursor, bool, error) {
	if s == "" {
		return cursor{}, false, nil
	}
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return cursor{}, false, fmt.Errorf("decoding cursor: %w", store.ErrInvalidCursor)
	}
	parts := strings.Split(string(raw), ".")
	if len(parts) != 3 || parts[0] != "v1" {
		return cursor{}, false, fmt.Errorf("decoding cursor: %w", store.ErrInvalidCursor)
	}
	t, err1 := strconv.ParseInt(parts[1], 10, 64)
	id, err2 := strconv.ParseInt(parts[2], 10, 64)
	if err1 != nil || err2 != nil {
		return cursor{}, false, fmt.Errorf("decoding cursor: %w", store.ErrInvalidCursor)
	}
	return cursor{t: t, id: id}, true, nil
}

// where accumulates AND-ed conditions and their arguments.
type where struct {
	conds []string
	args  []any
}

func (w *where) add(cond string, args ...any) {
	w.conds = append(w.conds, cond)
	w.args = append(w.args, args...)
}

func (w *where) eq(col, v string) {
	if v != "" {
		w.add(col+" = ?", v)
	}
}

// window bounds a time column: since inclusive, until exclusive.
func (w *where) window(col string, since, until time.Time) {
	if !since.IsZero() {
		w.add(col+" >= ?", since.UnixNano())
	}
	if !until.IsZero() {
		w.add(col+" < ?", until.UnixNano())
	}
}

func (w *where) String() string {
	if len(w.conds) == 0 {
		return ""
	}
	return " WHERE " + strings.Join(w.conds, " AND ")
}

// listing is one filtered list query, newest first: SELECT cols FROM from
// WHERE w, ordered by (timeCol DESC, idCol DESC), where idCol is the
// table's INTEGER PRIMARY KEY, so that a filtered page walks one (column,
// time) index in order and stops at LIMIT.
type listing struct {
	cols, from     string
	table          string // from without its joins, if any: where a sort picks the page's ids
	timeCol, idCol string
	w              where
	// sorts says that no index walks the matches in page order (a filter
	// through a side table), so SQLite collects and sorts them all.
	sorts bool
}

// query is the statement of the page after the cursor c ("" for the
// first), fetching limit+1 rows to tell whether a next page exists.
func (l listing) query(c string, limit int) (string, []any, error) {
	cur, ok, err := parseCursor(c)
	if err != nil {
		return "", nil, err
	}
	w := where{conds: slices.Clip(l.w.conds), args: slices.Clip(l.w.args)} // l stays reusable
	if ok {
		w.add("("+l.timeCol+", "+l.idCol+") < (?, ?)", cur.t, cur.id)
	}
	order := " ORDER BY " + l.timeCol + " DESC, " + l.idCol + " DESC"
	q := "SELECT " + l.cols + " FROM " + l.from + w.String() + order + " LIMIT ?"
	if l.sorts {
		// The page's ids are picked first, from the index alone where it
		// covers the filter, so that the sort holds a (time, id) pair per
		// match, not a whole row; only the page's rows are read.
		table := l.from
		if l.table != "" {
			table = l.table // a join's columns would keep the index from covering
		}
		q = "SELECT " + l.cols + " FROM " + l.from + " WHERE " + l.idCol + " IN (SELECT " + l.idCol +
			" FROM " + table + w.String() + order + " LIMIT ?)" + order
	}
	return q, append(w.args, limit+1), nil
}

// scanner is *sql.Row or *sql.Rows.
type scanner interface {
	Scan(dest ...any) error
}

// list runs l for one page of at most n rows (the configured default for
// n <= 0) after cursor c. scan reads a row and its keyset position; what
// names the rows in errors. It returns the page and the cursor of the
// next ("" after the last).
func list[T any](ctx context.Context, s *Store, what string, l listing, c string, n int,
	scan func(scanner) (T, cursor, error)) ([]T, string, error) {
	limit := store.PageLimit(n, s.cfg.DefaultLimit, s.cfg.MaxLimit)
	q, args, err := l.query(c, limit)
	if err != nil {
		return nil, "", err
	}
	rows, err := s.listQuery(ctx, q, args...)
	if err != nil {
		return nil, "", fmt.Errorf("querying %s: %w", what, err)
	}
	defer rows.Close()
	out := []T{}
	var last cursor
	for rows.Next() {
		if len(out) == limit { // the extra row: there is a next page
			return out, last.String(), nil
		}
		v, pos, err := scan(rows)
		if err != nil {
			return nil, "", err
		}
		out, last = append(out, v), pos
	}
	if err := rows.Err(); err != nil {
		return nil, "", fmt.Errorf("reading %s: %w", what, err)
	}
	return out, "", nil
}
