package store

import (
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// nanos stores a time as nanoseconds since the epoch; the zero time is 0.
func nanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// nullNanos stores a nil time as NULL.
func nullNanos(t *time.Time) any {
	if t == nil {
		return nil
	}
	return nanos(*t)
}

func fromNanos(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

func fromNullNanos(n sql.NullInt64) *time.Time {
	if !n.Valid {
		return nil
	}
	t := fromNanos(n.Int64)
	return &t
}

// jsonText stores a list, map or struct as JSON text, and an empty one as
// NULL.
func jsonText[T any](v T, empty bool) (any, error) {
	if empty {
		return nil, nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encoding %T: %w", v, err)
	}
	return string(b), nil
}

func jsonList(v []string) (any, error) { return jsonText(v, len(v) == 0) }

func jsonMap(v map[string][]string) (any, error) { return jsonText(v, len(v) == 0) }

// decodeJSON decodes a nullable JSON column into dst; NULL leaves dst as is.
func decodeJSON(col sql.NullString, dst any) error {
	if !col.Valid || col.String == "" {
		return nil
	}
	if err := json.Unmarshal([]byte(col.String), dst); err != nil {
		return fmt.Errorf("decoding %T column: %w", dst, err)
	}
	return nil
}

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
		return cursor{}, false, fmt.Errorf("decoding cursor: %w", ErrInvalidCursor)
	}
	parts := strings.Split(string(raw), ".")
	if len(parts) != 3 || parts[0] != "v1" {
		return cursor{}, false, fmt.Errorf("decoding cursor: %w", ErrInvalidCursor)
	}
	t, err1 := strconv.ParseInt(parts[1], 10, 64)
	id, err2 := strconv.ParseInt(parts[2], 10, 64)
	if err1 != nil || err2 != nil {
		return cursor{}, false, fmt.Errorf("decoding cursor: %w", ErrInvalidCursor)
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

// after continues a (time DESC, id DESC) keyset from c.
func (w *where) after(timeCol, idCol string, c cursor, ok bool) {
	if ok {
		w.add("("+timeCol+", "+idCol+") < (?, ?)", c.t, c.id)
	}
}

func (w *where) String() string {
	if len(w.conds) == 0 {
		return ""
	}
	return " WHERE " + strings.Join(w.conds, " AND ")
}

// limit resolves a requested page size.
func (s *Store) limit(n int) int {
	switch {
	case n <= 0:
		return s.cfg.DefaultLimit
	case n > s.cfg.MaxLimit:
		return s.cfg.MaxLimit
	}
	return n
}
