package delivery

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// countingEvents records what a spool reports.
type countingEvents struct {
	drops   map[string]int
	entries int
	badCur  int // cursors reported invalid
}

func (c *countingEvents) dropped(reason string, n int) {
	if c.drops == nil {
		c.drops = map[string]int{}
	}
	c.drops[reason] += n
}
func (c *countingEvents) depth(entries int, _ int64) { c.entries = entries }
func (c *countingEvents) cursorInvalid(error)        { c.badCur++ }

func rec(i int) []byte { return fmt.Appendf(nil, `{"id":"%06d"}`, i) }

// drain reads and acks everything, returning the records in order.
func drain(t *testing.T, s *spool, batch int) []string {
	t.Helper()
	var out []string
	for {
		recs, next, err := s.peek(batch, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) == 0 {
			return out
		}
		for _, r := range recs {
			out = append(out, string(r))
		}
		if err := s.ack(next, len(recs)); err != nil {
			t.Fatal(err)
		}
	}
}

func TestSpoolSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	ev := &countingEvents{}
	lim := spoolLimits{maxBytes: 1 << 20, maxEntries: 1000}
	s, err := openSpool(dir, lim, ev)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 300 {
		if _, _, err := s.append([][]byte{rec(i)}); err != nil {
			t.Fatal(err)
		}
	}
	// Deliver the first 100, then "restart".
	recs, next, _ := s.peek(100, 1<<20)
	if len(recs) != 100 {
		t.Fatalf("peeked %d", len(recs))
	}
	if err := s.ack(next, 100); err != nil {
		t.Fatal(err)
	}
	if err := s.close(); err != nil {
		t.Fatal(err)
	}
	s, err = openSpool(dir, lim, ev)
	if err != nil {
		t.Fatal(err)
	}
	if ev.entries != 200 {
		t.Errorf("reopened depth %d, want 200", ev.entries)
	}
	got := drain(t, s, 37)
	if len(got) != 200 || got[0] != string(rec(100)) || got[199] != string(rec(299)) {
		t.Fatalf("after restart got %d records, first %q", len(got), got[0])
	}
	if len(ev.drops) != 0 {
		t.Errorf("drops %v", ev.drops)
	}
	// Segments that were fully read are deleted, the last one too.
	segs, _ := filepath.Glob(filepath.Join(dir, "seg-*.log"))
	if len(segs) != 0 {
		t.Errorf("%d segment files left after draining, want 0", len(segs))
	}
	s.close()
}

func TestSpoolTornTail(t *testing.T) {
	dir := t.TempDir()
	ev := &countingEvents{}
	lim := spoolLimits{maxBytes: 1 << 20, maxEntries: 1000}
	s, _ := openSpool(dir, lim, ev)
	if _, _, err := s.append([][]byte{rec(0), rec(1), rec(2)}); err != nil {
		t.Fatal(err)
	}
	s.close()
	// A crash in the middle of a write: half a record at the tail.
	segs, _ := filepath.Glob(filepath.Join(dir, "seg-*.log"))
	f, _ := os.OpenFile(segs[len(segs)-1], os.O_WRONLY|os.O_APPEND, 0)
	f.Write(appendRecord(nil, rec(3))[:10])
	f.Close()
	s, err := openSpool(dir, lim, ev)
	if err != nil {
		t.Fatal(err)
	}
	if ev.drops["corrupt"] != 1 {
		t.Errorf("corrupt drops %d, want 1", ev.drops["corrupt"])
	}
	// Appending after recovery must not be hidden behind the torn bytes.
	if _, _, err := s.append([][]byte{rec(4)}); err != nil {
		t.Fatal(err)
	}
	got := drain(t, s, 10)
	want := []string{string(rec(0)), string(rec(1)), string(rec(2)), string(rec(4))}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("got %v, want %v", got, want)
	}
	s.close()
}

func TestSpoolFlippedBit(t *testing.T) {
	dir := t.TempDir()
	ev := &countingEvents{}
	lim := spoolLimits{maxBytes: 1 << 20, maxEntries: 1000}
	s, _ := openSpool(dir, lim, ev)
	s.append([][]byte{rec(0), rec(1), rec(2)})
	s.close()
	segs, _ := filepath.Glob(filepath.Join(dir, "seg-*.log"))
	b, _ := os.ReadFile(segs[0])
	second := len(segMagic) + len(appendRecord(nil, rec(0)))
	b[second+recHeader+3] ^= 0x40 // damage the second record's payload
	os.WriteFile(segs[0], b, 0o600)
	s, err := openSpool(dir, lim, ev)
	if err != nil {
		t.Fatal(err)
	}
	got := drain(t, s, 10)
	if len(got) != 1 || got[0] != string(rec(0)) || ev.drops["corrupt"] != 1 {
		t.Errorf("got %v, drops %v; want the first record and one corrupt tail", got, ev.drops)
	}
	s.close()
}

func TestSpoolOverflowDropsOldest(t *testing.T) {
	dir := t.TempDir()
	ev := &countingEvents{}
	s, err := openSpool(dir, spoolLimits{maxBytes: 1 << 20, maxEntries: 80}, ev)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 200 {
		if _, _, err := s.append([][]byte{rec(i)}); err != nil {
			t.Fatal(err)
		}
	}
	if ev.entries > 80 {
		t.Errorf("depth %d over the bound", ev.entries)
	}
	got := drain(t, s, 1000)
	if len(got)+ev.drops["overflow"] != 200 {
		t.Errorf("kept %d + dropped %d != 200", len(got), ev.drops["overflow"])
	}
	if got[len(got)-1] != string(rec(199)) {
		t.Errorf("newest record lost: last is %s", got[len(got)-1])
	}
	if got[0] == string(rec(0)) {
		t.Errorf("oldest record kept although the spool overflowed")
	}
	// What is kept is the newest run, in order.
	for i, g := range got {
		if g != string(rec(200-len(got)+i)) {
			t.Fatalf("record %d is %s", i, g)
		}
	}
	s.close()
}

func TestSpoolByteBound(t *testing.T) {
	ev := &countingEvents{}
	s, _ := openSpool(t.TempDir(), spoolLimits{maxBytes: 8192, maxEntries: 1 << 20}, ev)
	var total int64
	for i := range 2000 {
		s.append([][]byte{rec(i)})
		total += int64(recHeader + len(rec(i)))
		if s.bytes > 8192 {
			t.Fatalf("spool holds %d bytes, bound 8192", s.bytes)
		}
	}
	if ev.drops["overflow"] == 0 {
		t.Error("no overflow counted")
	}
	big := make([]byte, 9000)
	s.append([][]byte{big})
	if ev.drops["too_large"] != 1 {
		t.Errorf("too_large %d, want 1", ev.drops["too_large"])
	}
	s.close()
}

func TestParseCursor(t *testing.T) {
	for _, tc := range []struct {
		in string
		ok bool
	}{
		{string(formatCursor(pos{3, 8})), true},
		{string(formatCursor(pos{3, 100})), true},
		{"3 100 " + strings.Fields(string(formatCursor(pos{3, 100})))[2], false}, // no newline: cut short
		{"3 100\n", false},
		{"3 101 " + strings.Fields(string(formatCursor(pos{3, 100})))[2] + "\n", false}, // checksum mismatch
		{string(formatCursor(pos{3, 7})), false},
		{string(formatCursor(pos{0, 8})), false},
		{"", false},
		{"\x00\x00\x00\x00", false},
	} {
		_, err := parseCursor([]byte(tc.in))
		if (err == nil) != tc.ok {
			t.Errorf("parseCursor(%q) error %v", tc.in, err)
		}
	}
}

func FuzzParseCursor(f *testing.F) {
	f.Add(formatCursor(pos{3, 100}))
	f.Add([]byte("3 100\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := parseCursor(b)
		if err != nil {
			return
		}
		if string(formatCursor(p)) != string(b) {
			t.Fatalf("%q parsed as %v, which formats as %q", b, p, formatCursor(p))
		}
	})
}

func FuzzParseRecord(f *testing.F) {
	f.Add(appendRecord(nil, []byte(`{"id":"a"}`)))
	f.Add([]byte{1, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		p, n, ok := parseRecord(b)
		if !ok {
			return
		}
		if n != recHeader+len(p) || n > len(b) {
			t.Fatalf("n %d for payload %d of %d bytes", n, len(p), len(b))
		}
		if string(appendRecord(nil, p)) != string(b[:n]) {
			t.Fatal("record does not round-trip")
		}
	})
}
