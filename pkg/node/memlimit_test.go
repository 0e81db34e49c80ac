package node

import (
	"math"
	"os"
	"runtime/debug"
	"testing"

	"github.com/rs/zerolog"
)

func TestMemoryLimit(t *testing.T) {
	prev := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(prev) })
	if v, ok := os.LookupEnv("GOMEMLIMIT"); ok {
		os.Unsetenv("GOMEMLIMIT")
		t.Cleanup(func() { os.Setenv("GOMEMLIMIT", v) })
	}
	if err := SetMemoryLimit(512<<20, 0.8, zerolog.Nop()); err != nil {
		t.Fatal(err)
	}
	ratio := 0.8
	if got, want := debug.SetMemoryLimit(-1), int64(float64(512<<20)*ratio); got != want {
		t.Errorf("limit %d, want %d (80%% of 512 MiB)", got, want)
	}
	if err := SetMemoryLimit(512<<20, 1.5, zerolog.Nop()); err == nil {
		t.Error("a ratio above 1 accepted")
	}
	// GOMEMLIMIT wins; no container limit leaves the runtime alone.
	debug.SetMemoryLimit(math.MaxInt64)
	t.Setenv("GOMEMLIMIT", "100MiB")
	SetMemoryLimit(512<<20, 0.8, zerolog.Nop())
	SetMemoryLimit(0, 0.8, zerolog.Nop())
	if got := debug.SetMemoryLimit(-1); got != math.MaxInt64 {
		t.Errorf("limit changed to %d despite GOMEMLIMIT", got)
	}
}
