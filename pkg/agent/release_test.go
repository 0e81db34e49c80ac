package agent

import (
	"math"
	"os"
	"runtime/debug"
	"testing"

	"github.com/execid/correlator/pkg/join"
)

func TestMemoryRelease(t *testing.T) {
	var m memoryRelease
	steps := []struct {
		held int
		want bool
	}{
		{10 << 20, false},  // growing
		{100 << 20, false}, // the peak
		{60 << 20, false},  // 40 MiB freed, but more than half still held
		{40 << 20, true},   // under half the peak and 60 MiB freed
		{30 << 20, false},  // the new peak is 40 MiB: 10 MiB freed
		{20 << 20, false},  // half, but only 20 MiB freed
	}
	for i, s := range steps {
		if got := m.observe(join.Stats{ProcessBytes: s.held}); got != s.want {
			t.Fatalf("step %d (held %d MiB): released %v, want %v", i, s.held>>20, got, s.want)
		}
	}
}

func TestFootprintLimit(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		live, besides, capBytes, want int64
	}{
		{10 * mib, 8 * mib, 0, footprintFloor},       // small: the runtime's pacing
		{60 * mib, 8 * mib, 0, 98 * mib},             // large: the live heap and a half
		{60 * mib, 8 * mib, 80 * mib, 80 * mib},      // never past the container's
		{10 * mib, 8 * mib, 32 * mib, 32 * mib},      // nor the floor past it
		{1 << 40, 8 * mib, 0, 1<<40 + 1<<39 + 8*mib}, // no overflow short of it
		{60 * mib, 8 * mib, -1, 98 * mib},            // a negative cap is none
	} {
		if got := footprintLimit(c.live, c.besides, c.capBytes); got != c.want {
			t.Errorf("footprintLimit(%d MiB, %d MiB, %d): %d MiB, want %d MiB", c.live/mib, c.besides/mib, c.capBytes, got/mib, c.want/mib)
		}
	}
}

// TestFootprintRestores: the limit the agent set goes back to its cap
// when it stops, and a change within 1/16 is not applied.
func TestFootprintRestores(t *testing.T) {
	before := debug.SetMemoryLimit(-1)
	defer debug.SetMemoryLimit(before)
	f := newFootprint(0)
	f.observe()
	if f.set == 0 || debug.SetMemoryLimit(-1) != f.set {
		t.Fatalf("limit %d after observe, want the one set (%d)", debug.SetMemoryLimit(-1), f.set)
	}
	set := f.set
	f.apply(set + set/32)
	if f.set != set {
		t.Fatalf("a change of 1/32 was applied: %d, was %d", f.set, set)
	}
	f.restore()
	if got := debug.SetMemoryLimit(-1); got != math.MaxInt64 {
		t.Fatalf("limit %d after restore, want none", got)
	}
}

// TestFootprintBackToFloor: a limit raised a sixteenth past the floor
// goes back to the floor when the live heap falls, though the way back is
// under a sixteenth of the raised limit; any other change that small is
// left alone.
func TestFootprintBackToFloor(t *testing.T) {
	before := debug.SetMemoryLimit(-1)
	defer debug.SetMemoryLimit(before)
	const mib = 1 << 20
	for _, capBytes := range []int64{0, 60 * mib} {
		f := newFootprint(capBytes)
		floor := footprintLimit(0, 0, capBytes)
		f.apply(floor)
		raised := floor + floor/16
		f.apply(raised) // a burst: a sixteenth, applied
		if f.set != raised {
			t.Fatalf("cap %d: a change of a sixteenth was not applied: %d, want %d", capBytes, f.set, raised)
		}
		f.apply(raised - raised/32) // positive control: under a sixteenth, above the floor
		if f.set != raised {
			t.Fatalf("cap %d: a change of 1/32 above the floor was applied: %d", capBytes, f.set)
		}
		f.apply(floor) // the burst's memory let go: under a sixteenth of raised
		if f.set != floor || debug.SetMemoryLimit(-1) != floor {
			t.Fatalf("cap %d: limit %d (runtime %d) after the live heap fell, want the floor %d",
				capBytes, f.set, debug.SetMemoryLimit(-1), floor)
		}
		f.restore()
	}
}

// TestFootprintGCPercent: the agent paces its heap at footprintGCPercent
// while it runs and gives the old percent back when it stops; a GOGC in
// the environment is left to rule.
func TestFootprintGCPercent(t *testing.T) {
	if v, ok := os.LookupEnv("GOGC"); ok {
		os.Unsetenv("GOGC")
		t.Cleanup(func() { os.Setenv("GOGC", v) })
	}
	limit := debug.SetMemoryLimit(-1)
	defer debug.SetMemoryLimit(limit)
	const before = 150
	defer debug.SetGCPercent(debug.SetGCPercent(before))

	f := newFootprint(0)
	f.start()
	if got := debug.SetGCPercent(-1); got != footprintGCPercent {
		t.Fatalf("GC percent %d while the agent runs, want %d", got, footprintGCPercent)
	}
	debug.SetGCPercent(footprintGCPercent)
	if f.set == 0 {
		t.Fatal("start set no memory limit: the raised percent would leave the heap unbounded")
	}
	f.restore()
	if got := debug.SetGCPercent(before); got != before {
		t.Fatalf("GC percent %d after the agent stopped, want %d back", got, before)
	}

	// Positive control for the environment: the same start with GOGC set
	// leaves the percent alone.
	os.Setenv("GOGC", "150")
	defer os.Unsetenv("GOGC")
	g := newFootprint(0)
	g.start()
	defer g.restore()
	if got := debug.SetGCPercent(before); got != before {
		t.Fatalf("GC percent %d with GOGC=150 set, want it left at %d", got, before)
	}
}
