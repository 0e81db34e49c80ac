package capture

import (
	"fmt"
	"os/exec"
	"testing"
	"time"

	"github.com/execid/correlator/internal/testutil"
)

// mechanismBound is how long these tests wait for an event or a stop. It
// is below the minute FlushInterval they set, so what arrives within it
// came through the mechanism under test, not the deadline; it is a bound,
// not a timing: a healthy run takes milliseconds.
const mechanismBound = 40 * time.Second

// The reader waits for the kernel's backlog wakeup on Go's netpoller
// (ringWaiter), not in a blocking epoll_wait. With FlushInterval at its
// maximum, only the wakeup delivers an exec within mechanismBound; the
// control has the wakeup out of reach and a short deadline deliver it.
func TestRingWakeupReachesReader(t *testing.T) {
	cases := []struct {
		name   string
		flush  time.Duration
		wakeup uint32
	}{
		{"the kernel's wakeup, the deadline a minute away", time.Minute, 1},
		{"control: the deadline, the wakeup out of reach", 50 * time.Millisecond, 1 << 30},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, func(cfg *Config) {
				allScope(cfg)
				cfg.FlushInterval, cfg.WakeupBytes = c.flush, c.wakeup
			})
			// The first exec may be read by the reader's first drain; the
			// second comes once it has read one and waits.
			for i := range 2 {
				pid := runTrue(t)
				testutil.EventuallyWithin(t, mechanismBound, fmt.Sprintf("exec %d reached the reader", i+1), func() bool {
					return len(h.all(func(ev Event) bool { return ev.Kind == KindExec && ev.PID == pid })) > 0
				})
			}
		})
	}
}

// Cancelling the reader while it waits out a minute's FlushInterval stops
// it at once: the wait is closed, not run to its end.
func TestRingReaderStopsWhileWaiting(t *testing.T) {
	h := newHarness(t, func(cfg *Config) { allScope(cfg); cfg.FlushInterval, cfg.WakeupBytes = time.Minute, 1 })
	// Positive control: the reader runs (it reads an exec), then waits.
	pid := runTrue(t)
	testutil.EventuallyWithin(t, mechanismBound, "the exec reached the reader", func() bool {
		return len(h.all(func(ev Event) bool { return ev.Kind == KindExec && ev.PID == pid })) > 0
	})
	h.cancel()
	select {
	case <-h.done:
	case <-time.After(mechanismBound):
		t.Fatalf("the reader did not stop within %s of its cancel", mechanismBound)
	}
}

// runTrue runs /bin/true and returns its pid.
func runTrue(t *testing.T) uint32 {
	t.Helper()
	cmd := exec.Command("/bin/true")
	if err := cmd.Run(); err != nil {
		t.Fatalf("running /bin/true: %v", err)
	}
	return uint32(cmd.Process.Pid)
}
