package delivery

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestSpoolDamagedCursor: 100 of 300 records are delivered, then the
// cursor file is damaged. The restart counts it and delivers every
// undelivered record, in order (some delivered ones again: at least once).
// The intact case is the control: it delivers exactly the 200.
func TestSpoolDamagedCursor(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(b []byte) []byte
		bad    bool
	}{
		{"intact", func(b []byte) []byte { return b }, false},
		{"truncated", func(b []byte) []byte { return b[:len(b)-3] }, true},
		{"empty", func([]byte) []byte { return nil }, true},
		{"garbage", func(b []byte) []byte { return []byte("\x7fELF\x00\x00garbage") }, true},
		{"offset changed", func(b []byte) []byte { c := slices.Clone(b); c[2]++; return c }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			lim := spoolLimits{maxBytes: 1 << 20, maxEntries: 1000}
			s, err := openSpool(dir, lim, &countingEvents{})
			if err != nil {
				t.Fatal(err)
			}
			for i := range 300 {
				if _, _, err := s.append([][]byte{rec(i)}); err != nil {
					t.Fatal(err)
				}
			}
			recs, next, _ := s.peek(100, 1<<20)
			if err := s.ack(next, len(recs)); err != nil || len(recs) != 100 {
				t.Fatalf("acked %d: %v", len(recs), err)
			}
			s.close()
			p := filepath.Join(dir, cursorFile)
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, tc.damage(b), 0o600); err != nil {
				t.Fatal(err)
			}
			ev := &countingEvents{}
			if s, err = openSpool(dir, lim, ev); err != nil {
				t.Fatal(err)
			}
			defer s.close()
			got := drain(t, s, 64)
			if tc.bad != (ev.badCur == 1) || ev.badCur > 1 {
				t.Errorf("invalid cursors counted %d", ev.badCur)
			}
			if len(got) < 200 || len(got) > 300 {
				t.Fatalf("delivered %d records after the restart, want 200 to 300", len(got))
			}
			for i, g := range got[len(got)-200:] {
				if g != string(rec(100+i)) {
					t.Fatalf("undelivered record %d is %s", 100+i, g)
				}
			}
			if !tc.bad && len(got) != 200 {
				t.Errorf("an intact cursor sent %d delivered records again", len(got)-200)
			}
			if len(ev.drops) != 0 {
				t.Errorf("drops %v", ev.drops)
			}
		})
	}
}

// TestSpoolIDsNeverReused: a drained spool deletes every segment; after a
// restart the next segment must not take an id the cursor still names, or
// its records would be skipped as delivered.
func TestSpoolIDsNeverReused(t *testing.T) {
	dir := t.TempDir()
	lim := spoolLimits{maxBytes: 1 << 20, maxEntries: 1000}
	ev := &countingEvents{}
	open := func() *spool {
		s, err := openSpool(dir, lim, ev)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	s := open()
	for round := range 3 {
		for i := range 10 {
			if _, _, err := s.append([][]byte{rec(round*100 + i)}); err != nil {
				t.Fatal(err)
			}
		}
		if round > 0 { // leave this round's records undelivered over a restart
			s.close()
			s = open()
		}
		got := drain(t, s, 3)
		if len(got) != 10 || got[0] != string(rec(round*100)) {
			t.Fatalf("round %d: got %v", round, got)
		}
		s.close()
		s = open()
	}
	s.close()
	if len(ev.drops) != 0 || ev.badCur != 0 {
		t.Errorf("drops %v, invalid cursors %d", ev.drops, ev.badCur)
	}
}
