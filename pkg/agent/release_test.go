package agent

import (
	"math"
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
		{10 * mib, 8 * mib, 0, footprintFloor},           // small: the runtime's pacing
		{60 * mib, 8 * mib, 0, 108 * mib},                // large: the live heap and two thirds
		{60 * mib, 8 * mib, 80 * mib, 80 * mib},          // never past the container's
		{10 * mib, 8 * mib, 32 * mib, 32 * mib},          // nor the floor past it
		{1 << 40, 8 * mib, 0, 1<<40 + (1<<41)/3 + 8*mib}, // no overflow short of it
		{60 * mib, 8 * mib, -1, 108 * mib},               // a negative cap is none
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
