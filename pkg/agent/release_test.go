package agent

import (
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
