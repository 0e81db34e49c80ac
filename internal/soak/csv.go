package soak

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"
)

// column is one CSV column: its header name and how a row's field is
// written and read back. WriteCSV and ReadCSV share one list, so the two
// cannot drift apart.
type column[T any] struct {
	name   string
	format func(*T) (string, error)
	parse  func(*T, string) error
}

func sampleColumns() []column[Sample] {
	return []column[Sample]{
		timeCol("at", func(s *Sample) *time.Time { return &s.At }),
		secondsCol("elapsed_s", func(s *Sample) *time.Duration { return &s.Elapsed }),
		intCol("agent", func(s *Sample) *int { return &s.Agent }),
		textCol("phase", func(s *Sample) *string { return &s.Phase }),
		int64Col("rss_bytes", func(s *Sample) *int64 { return &s.RSSBytes }),
		int64Col("anon_bytes", func(s *Sample) *int64 { return &s.AnonBytes }),
		int64Col("heap_bytes", func(s *Sample) *int64 { return &s.HeapBytes }),
		int64Col("heap_kept_bytes", func(s *Sample) *int64 { return &s.HeapKeptBytes }),
		int64Col("next_gc_bytes", func(s *Sample) *int64 { return &s.NextGCBytes }),
		intCol("goroutines", func(s *Sample) *int { return &s.Goroutines }),
		intCol("open_files", func(s *Sample) *int { return &s.OpenFiles }),
		floatCol("exec_rate", func(s *Sample) *float64 { return &s.ExecRate }),
		floatCol("cpu_per_exec_us", func(s *Sample) *float64 { return &s.CPUPerExecUS }),
		int64Col("store_bytes", func(s *Sample) *int64 { return &s.StoreBytes }),
		int64Col("wal_bytes", func(s *Sample) *int64 { return &s.WALBytes }),
		int64Col("ring_drops", func(s *Sample) *int64 { return &s.RingDrops }),
		int64Col("evictions", func(s *Sample) *int64 { return &s.Evictions }),
		int64Col("store_dropped", func(s *Sample) *int64 { return &s.StoreDropped }),
		intCol("queries", func(s *Sample) *int { return &s.Queries }),
		floatCol("query_p99_ms", func(s *Sample) *float64 { return &s.QueryP99MS }),
		intCol("query_fails", func(s *Sample) *int { return &s.QueryFails }),
		int64Col("acked", func(s *Sample) *int64 { return &s.Acked }),
		int64Col("verified", func(s *Sample) *int64 { return &s.Verified }),
		int64Col("lost", func(s *Sample) *int64 { return &s.Lost }),
		floatCol("node_busy", func(s *Sample) *float64 { return &s.NodeBusy }),
		floatCol("node_steal", func(s *Sample) *float64 { return &s.NodeSteal }),
	}
}

func eventColumns() []column[Event] {
	return []column[Event]{
		timeCol("at", func(e *Event) *time.Time { return &e.At }),
		secondsCol("elapsed_s", func(e *Event) *time.Duration { return &e.Elapsed }),
		textCol("what", func(e *Event) *string { return &e.What }),
	}
}

func queryColumns() []column[Query] {
	return []column[Query]{
		timeCol("at", func(q *Query) *time.Time { return &q.At }),
		secondsCol("elapsed_s", func(q *Query) *time.Duration { return &q.Elapsed }),
		textCol("kind", func(q *Query) *string { return &q.Kind }),
		secondsCol("took_s", func(q *Query) *time.Duration { return &q.Took }),
		secondsCol("first_byte_s", func(q *Query) *time.Duration { return &q.FirstByte }),
		secondsCol("timer_waited_s", func(q *Query) *time.Duration { return &q.TimerWaited }),
		secondsCol("agent_waited_s", func(q *Query) *time.Duration { return &q.AgentWaited }),
		secondsCol("agent_ran_s", func(q *Query) *time.Duration { return &q.AgentRan }),
	}
}

// WriteCSV writes samples as CSV with a header row: At in RFC 3339 with
// nanoseconds (UTC), Elapsed in decimal seconds, exact to the nanosecond.
func WriteCSV(w io.Writer, samples []Sample) error {
	return writeTable(w, sampleColumns(), samples, "soak samples")
}

// ReadCSV reads what WriteCSV wrote. At comes back in UTC, without a
// monotonic clock reading; every other field comes back exactly.
func ReadCSV(r io.Reader) ([]Sample, error) {
	return readTable(r, sampleColumns(), "soak samples")
}

// WriteEventsCSV writes events as CSV, in the format of WriteCSV.
func WriteEventsCSV(w io.Writer, events []Event) error {
	return writeTable(w, eventColumns(), events, "soak events")
}

// ReadEventsCSV reads what WriteEventsCSV wrote.
func ReadEventsCSV(r io.Reader) ([]Event, error) {
	return readTable(r, eventColumns(), "soak events")
}

// WriteQueriesCSV writes every timed query, in the format of WriteCSV:
// the tail's moments and kinds, which the samples' p99 per interval hides.
func WriteQueriesCSV(w io.Writer, queries []Query) error {
	return writeTable(w, queryColumns(), queries, "soak queries")
}

// ReadQueriesCSV reads what WriteQueriesCSV wrote.
func ReadQueriesCSV(r io.Reader) ([]Query, error) {
	return readTable(r, queryColumns(), "soak queries")
}

func writeTable[T any](w io.Writer, cols []column[T], rows []T, what string) error {
	cw := csv.NewWriter(w)
	rec := make([]string, len(cols))
	for i, c := range cols {
		rec[i] = c.name
	}
	if err := cw.Write(rec); err != nil {
		return fmt.Errorf("writing %s header: %w", what, err)
	}
	for n := range rows {
		for i, c := range cols {
			v, err := c.format(&rows[n])
			if err != nil {
				return fmt.Errorf("writing %s: row %d, %s: %w", what, n+1, c.name, err)
			}
			rec[i] = v
		}
		if err := cw.Write(rec); err != nil {
			return fmt.Errorf("writing %s: row %d: %w", what, n+1, err)
		}
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		return fmt.Errorf("writing %s: %w", what, err)
	}
	return nil
}

func readTable[T any](r io.Reader, cols []column[T], what string) ([]T, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = len(cols)
	cr.ReuseRecord = true
	header, err := cr.Read()
	if errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("reading %s: line 1: no header: %w", what, io.ErrUnexpectedEOF)
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s header: %w", what, err)
	}
	for i, c := range cols {
		if header[i] != c.name {
			line, col := cr.FieldPos(i)
			return nil, fmt.Errorf("reading %s header: line %d, column %d: %q, want %q", what, line, col, header[i], c.name)
		}
	}
	var rows []T
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			return rows, nil
		}
		if err != nil {
			// A csv.ParseError names the line and column itself.
			return nil, fmt.Errorf("reading %s: %w", what, err)
		}
		var row T
		for i, c := range cols {
			if err := c.parse(&row, rec[i]); err != nil {
				line, col := cr.FieldPos(i)
				return nil, fmt.Errorf("reading %s: line %d, column %d (%s): %w", what, line, col, c.name, err)
			}
		}
		rows = append(rows, row)
	}
}

func intCol[T any](name string, field func(*T) *int) column[T] {
	return column[T]{
		name:   name,
		format: func(r *T) (string, error) { return strconv.Itoa(*field(r)), nil },
		parse: func(r *T, v string) (err error) {
			*field(r), err = strconv.Atoi(v)
			return err
		},
	}
}

func int64Col[T any](name string, field func(*T) *int64) column[T] {
	return column[T]{
		name:   name,
		format: func(r *T) (string, error) { return strconv.FormatInt(*field(r), 10), nil },
		parse: func(r *T, v string) (err error) {
			*field(r), err = strconv.ParseInt(v, 10, 64)
			return err
		},
	}
}

// floatCol writes the shortest text that parses back to the same bits.
func floatCol[T any](name string, field func(*T) *float64) column[T] {
	return column[T]{
		name:   name,
		format: func(r *T) (string, error) { return strconv.FormatFloat(*field(r), 'g', -1, 64), nil },
		parse: func(r *T, v string) (err error) {
			*field(r), err = strconv.ParseFloat(v, 64)
			return err
		},
	}
}

// textCol refuses a carriage return: encoding/csv reads a quoted "\r\n"
// back as "\n", so the text would not round-trip.
func textCol[T any](name string, field func(*T) *string) column[T] {
	return column[T]{
		name: name,
		format: func(r *T) (string, error) {
			if strings.ContainsRune(*field(r), '\r') {
				return "", errors.New("carriage return in text")
			}
			return *field(r), nil
		},
		parse: func(r *T, v string) error {
			if strings.ContainsRune(v, '\r') {
				return errors.New("carriage return in text")
			}
			*field(r) = v
			return nil
		},
	}
}

// timeCol writes UTC so the file sorts as text; MarshalText refuses the
// years RFC 3339 cannot write, and parsing refuses what would not write.
func timeCol[T any](name string, field func(*T) *time.Time) column[T] {
	return column[T]{
		name: name,
		format: func(r *T) (string, error) {
			b, err := field(r).UTC().MarshalText()
			return string(b), err
		},
		parse: func(r *T, v string) error {
			t, err := time.Parse(time.RFC3339Nano, v)
			if err != nil {
				return err
			}
			t = t.UTC()
			if y := t.Year(); y < 0 || y > 9999 {
				return fmt.Errorf("parsing time %q: year %d in UTC is outside 0000-9999", v, y)
			}
			*field(r) = t
			return nil
		},
	}
}

func secondsCol[T any](name string, field func(*T) *time.Duration) column[T] {
	return column[T]{
		name:   name,
		format: func(r *T) (string, error) { return formatSeconds(*field(r)), nil },
		parse: func(r *T, v string) (err error) {
			*field(r), err = parseSeconds(v)
			return err
		},
	}
}

// formatSeconds writes d as decimal seconds, with at most nine decimals
// and no trailing zeros: a spreadsheet reads seconds, and parseSeconds
// gets the same nanoseconds back, which a float64 would not past 104 days.
func formatSeconds(d time.Duration) string {
	u := uint64(d)
	sign := ""
	if d < 0 {
		sign, u = "-", -u
	}
	s := sign + strconv.FormatUint(u/1e9, 10)
	if frac := u % 1e9; frac != 0 {
		s += strings.TrimRight(fmt.Sprintf(".%09d", frac), "0")
	}
	return s
}

// parseSeconds reads [-]digits[.digits], at most nine decimals, exactly.
func parseSeconds(v string) (time.Duration, error) {
	bad := func(why string) (time.Duration, error) {
		return 0, fmt.Errorf("parsing seconds %q: %s", v, why)
	}
	s, neg := strings.CutPrefix(v, "-")
	whole, frac, dot := strings.Cut(s, ".")
	if !allDigits(whole) || dot && !allDigits(frac) {
		return bad("want digits, an optional point and up to nine decimals")
	}
	if len(frac) > 9 {
		return bad("more than nine decimals")
	}
	if len(strings.TrimLeft(whole, "0")) > 10 {
		return bad("out of range")
	}
	w, err := strconv.ParseUint(whole, 10, 64)
	if err != nil {
		return bad(err.Error())
	}
	var f uint64
	if frac != "" {
		if f, err = strconv.ParseUint(frac+strings.Repeat("0", 9-len(frac)), 10, 64); err != nil {
			return bad(err.Error())
		}
	}
	// w has at most ten digits, so w*1e9+f fits in a uint64.
	ns, limit := w*1e9+f, uint64(math.MaxInt64)
	if neg {
		limit++
	}
	if ns > limit {
		return bad("out of range")
	}
	if neg {
		return time.Duration(-ns), nil
	}
	return time.Duration(ns), nil
}

func allDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
