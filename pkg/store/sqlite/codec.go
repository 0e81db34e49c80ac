package sqlite

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"reflect"
	"time"
	"unsafe"

	jsonv1 "github.com/go-json-experiment/json/v1"
)

// nanos stores a time as nanoseconds since the epoch; the zero time is 0.
func nanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// nullNanos stores the zero time as NULL: a session not seen to end, a
// process still running.
func nullNanos(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UnixNano()
}

func fromNanos(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

// encoder encodes JSON columns, keeping the first error, so that a row's
// arguments read as one list.
type encoder struct{ err error }

// json stores v (a slice, map or pointer) as JSON text, and an empty or
// nil one as NULL.
func (e *encoder) json(v any) any {
	rv := reflect.ValueOf(v)
	empty := rv.Kind() == reflect.Pointer && rv.IsNil() ||
		(rv.Kind() == reflect.Slice || rv.Kind() == reflect.Map) && rv.Len() == 0
	if empty || e.err != nil {
		return nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		e.err = fmt.Errorf("encoding %T: %w", v, err)
		return nil
	}
	return bindText(b)
}

// bindText is b as a string to bind as TEXT, without copying it: the
// driver copies it into SQLite as it binds. Only for bytes nothing writes
// again (made for the statement and dropped after it); the copies
// string(b) made were a twentieth of what the soak's agent allocated.
func bindText(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// unmarshalJSON decodes what the store encoded with encoding/json, with
// encoding/json's rules on the v2 decoder: half its CPU and a third of
// its allocations, where decoding was a fifth to a quarter of a query's
// CPU (make soak's who and command search on a copy of its store).
func unmarshalJSON(data []byte, v any) error {
	return jsonv1.Unmarshal(data, v)
}

// jsonColumn is one nullable JSON column and where it decodes to.
type jsonColumn struct {
	col sql.NullString
	dst any
}

// decodeJSON decodes each nullable JSON column into its destination; NULL
// leaves the destination as is.
func decodeJSON(cols ...jsonColumn) error {
	for _, c := range cols {
		if !c.col.Valid || c.col.String == "" {
			continue
		}
		if err := unmarshalJSON([]byte(c.col.String), c.dst); err != nil {
			return fmt.Errorf("decoding %T column: %w", c.dst, err)
		}
	}
	return nil
}
