package soak

import (
	"strings"
	"testing"
	"time"
)

// TestParsePasses: each retention line counts; those with a time and both
// durations give a span ending at the line's time; others (an older
// agent's, a torn line, a negative or unparsable field, another message
// that quotes it) count without one, or not at all.
func TestParsePasses(t *testing.T) {
	log := strings.Join([]string{
		`gc 17 @4.119s 0%: 0.29+5.9+0.048 ms clock`,
		`{"level":"info","processes":12,"took":40.5,"tidied":9.5,"time":"2026-12-02T00:31:03.250Z","message":"retention deleted old records"}`,
		`{"level":"info","processes":3,"time":"2026-12-02T00:31:13Z","message":"retention deleted old records"}`,
		`{"level":"info","took":1,"tidied":-2,"time":"2026-12-02T00:31:23.000Z","message":"retention deleted old records"}`,
		`{"level":"info","took":1,"tidied":2,"time":"yesterday","message":"retention deleted old records"}`,
		`{"level":"warn","took":1,"tidied":2,"time":"2026-12-02T00:31:33.000Z","message":"not retention deleted old records"}`,
		`{"level":"info","took":2.25,"tidied":0,"time":"2026-12-02T00:31:43.125+00:00","message":"retention deleted old records"}`,
		`{"level":"info","took":2.25,"tidied":0,"time":"2026-12-02T00:31:53.125Z","message":"retention deleted old rec`,
	}, "\n")
	ps, n := parsePasses([]byte(log))
	if n != 5 {
		t.Errorf("counted %d retention lines, want 5", n)
	}
	end := time.Date(2026, 12, 2, 0, 31, 3, 250e6, time.UTC)
	end2 := time.Date(2026, 12, 2, 0, 31, 43, 125e6, time.UTC)
	want := []Pass{{Start: end.Add(-50 * time.Millisecond), End: end}, {Start: end2.Add(-2250 * time.Microsecond), End: end2}}
	if len(ps) != len(want) {
		t.Fatalf("passes %v, want %v", ps, want)
	}
	for i := range want {
		if !ps[i].Start.Equal(want[i].Start) || !ps[i].End.Equal(want[i].End) {
			t.Errorf("pass %d: %v to %v, want %v to %v", i, ps[i].Start, ps[i].End, want[i].Start, want[i].End)
		}
	}
	if ps, n := parsePasses(nil); len(ps) != 0 || n != 0 {
		t.Errorf("an empty log: %v, %d", ps, n)
	}
}

// TestPassOverlap: a query overlaps a pass when their spans share an
// instant, whichever starts first; touching ends do not; slow and other
// queries are counted apart.
func TestPassOverlap(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	passes := []Pass{{Start: at(1000), End: at(1100)}, {Start: at(100), End: at(150)}}
	q := func(startMS, tookMS int) Query {
		return Query{At: at(startMS), Took: time.Duration(tookMS) * time.Millisecond}
	}
	qs := []Query{
		q(990, 20),  // slow, starts before the first pass and runs into it
		q(1050, 20), // slow, within it
		q(1100, 20), // slow, starts as it ends: not during
		q(500, 20),  // slow, between passes
		q(90, 5),    // other, ends before the second
		q(140, 5),   // other, within the second
		q(95, 60),   // slow, covers the second whole
	}
	got := passOverlap(qs, passes, 10*time.Millisecond)
	want := PassOverlap{Slow: 5, SlowDuring: 3, Other: 2, OtherDuring: 1}
	if got != want {
		t.Errorf("passOverlap = %+v, want %+v", got, want)
	}
	line := formatPasses(passes, got, 10*time.Millisecond)
	for _, s := range []string{"timed: 2,", "most 100.0 ms", "during one: 3 of 5 (60.0 %), others: 1 of 2 (50.0 %)"} {
		if !strings.Contains(line, s) {
			t.Errorf("formatPasses lacks %q:\n%s", s, line)
		}
	}
	if line := formatPasses(nil, PassOverlap{}, time.Millisecond); !strings.Contains(line, "0 of 0 (-)") {
		t.Errorf("no passes: %s", line)
	}
}

// FuzzParsePasses: any log reads without a panic; every span it gives
// ends after it starts, and it never gives more spans than lines counted.
func FuzzParsePasses(f *testing.F) {
	f.Add([]byte(`{"took":1.5,"tidied":0.5,"time":"2026-12-02T00:31:03.250Z","message":"retention deleted old records"}`))
	f.Add([]byte("retention deleted old records\n{\"message\":\"retention deleted old records\"}"))
	f.Fuzz(func(t *testing.T, log []byte) {
		ps, n := parsePasses(log)
		if len(ps) > n {
			t.Fatalf("%d spans from %d lines", len(ps), n)
		}
		for _, p := range ps {
			if p.End.Before(p.Start) {
				t.Fatalf("a span ends before it starts: %v", p)
			}
		}
	})
}
