package auditlog

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"

	"github.com/execid/correlator/internal/testutil"
)

// overBound is a line length the default bound must refuse: the old 64 MiB
// default let it through whole.
const overBound = 5 << 20

// TestTailSkipsOverlongLine: an exec line over the default bound between
// two good ones is skipped and counted as too_large; both good ones arrive.
// The second case writes it in two pieces while the tailer watches, so the
// half it sees first must be neither delivered nor counted.
func TestTailSkipsOverlongLine(t *testing.T) {
	big := execLine("too-big", overBound)
	for _, split := range []bool{false, true} {
		name := map[bool]string{false: "whole", true: "written in two pieces"}[split]
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "audit.log")
			f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			write := func(s string) {
				if _, err := f.WriteString(s); err != nil {
					t.Fatal(err)
				}
			}
			m := newTestMetrics(t)
			c := newCollector()
			runTailer(t, TailConfig{Paths: []string{path}}, m, c.sink) // default MaxLineBytes
			write(execLine("before", 0))
			if split {
				write(big[:len(big)/2])
				testutil.Eventually(t, "the line before arrives", func() bool { return c.has("before") })
				write(big[len(big)/2:])
			} else {
				write(big)
			}
			write(execLine("after", 0))
			testutil.Eventually(t, "the line after arrives", func() bool { return c.has("after") })
			c.exactlyOnce(t, []string{"before", "after"})
			if got := promtest.ToFloat64(m.recordsSkipped.WithLabelValues(ReasonTooLarge.String())); got != 1 {
				t.Errorf("correlator_audit_records_skipped_total{reason=%q} = %v, want 1", ReasonTooLarge, got)
			}
		})
	}
}

// TestDecodeSkipsOverlongLine: the one-shot decoder (audit parse, stdin)
// bounds lines the same way.
func TestDecodeSkipsOverlongLine(t *testing.T) {
	in := execLine("before", 0) + execLine("too-big", overBound) + execLine("after", 0)
	d := NewDecoder(DecoderConfig{}, zerolog.Nop(), nil)
	var ids []string
	counts, err := d.Decode(strings.NewReader(in), "test", func(evs []Event) error {
		for _, ev := range evs {
			ids = append(ids, ev.AuditID)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(ids, ",") != "before,after" || counts.Skipped[ReasonTooLarge] != 1 || counts.SkippedTotal() != 1 {
		t.Fatalf("events %v, skipped %v; want before,after and one too_large", ids, counts.SkippedByName())
	}
}

// repeatByte is an endless stream of one byte.
type repeatByte byte

func (r repeatByte) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(r)
	}
	return len(p), nil
}

// TestLineReaderStreamsPastLongLine: a 64 MiB line against a 1 MiB bound
// is consumed without being held: the buffer stays near the bound.
func TestLineReaderStreamsPastLongLine(t *testing.T) {
	const max, long = 1 << 20, 64 << 20
	in := io.MultiReader(io.LimitReader(repeatByte('x'), long), strings.NewReader("\nnext\n"))
	lr := newLineReader(bufio.NewReaderSize(in, readBufferSize), max)
	_, complete, tooLarge, err := lr.next()
	if err != nil || !complete || !tooLarge || lr.n != long+1 {
		t.Fatalf("long line: complete %v tooLarge %v n %d err %v", complete, tooLarge, lr.n, err)
	}
	if c := cap(lr.buf); c > 2*max {
		t.Fatalf("line buffer grew to %d bytes for a %d-byte bound: the long line was buffered", c, max)
	}
	line, complete, tooLarge, err := lr.next()
	if err != nil || !complete || tooLarge || string(line) != "next" {
		t.Fatalf("line after: %q complete %v tooLarge %v err %v", line, complete, tooLarge, err)
	}
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// TestReadAtMost: the webhook body reader never takes in more than the
// bound plus one byte, whatever Content-Length claims.
func TestReadAtMost(t *testing.T) {
	const limit = 10_000
	for _, tc := range []struct {
		name string
		size int64 // -1: endless
		hint int64
		ok   bool
	}{
		{"empty", 0, 0, true},
		{"at the bound, length known", limit, limit, true},
		{"at the bound, length unknown", limit, -1, true},
		{"one over", limit + 1, -1, false},
		{"endless, length unknown", -1, -1, false},
		{"endless, length understated", -1, 10, false},
		{"endless, length overstated", -1, 1 << 40, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var src io.Reader = repeatByte('x')
			if tc.size >= 0 {
				src = io.LimitReader(src, tc.size)
			}
			cr := &countingReader{r: src}
			b, err := readAtMost(cr, limit, tc.hint)
			if cr.n > limit+1 {
				t.Errorf("read %d bytes, bound %d", cr.n, limit)
			}
			if tc.ok {
				if err != nil || int64(len(b)) != tc.size || !bytes.Equal(b, bytes.Repeat([]byte("x"), int(tc.size))) {
					t.Fatalf("got %d bytes, err %v; want %d", len(b), err, tc.size)
				}
				return
			}
			var tooBig *http.MaxBytesError
			if !errors.As(err, &tooBig) || b != nil {
				t.Fatalf("got %d bytes, err %v; want an *http.MaxBytesError", len(b), err)
			}
		})
	}
}
