package capture

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
)

// Steering the kernel's next pid (ns_last_pid), for the pid-reuse tests.
// The lineage map is keyed by the pid in the host's namespace, so the
// host's counter is the one to steer: a fresh pid namespace would start its
// own counter low but leave the host pid, the map's key, where it is.
const (
	nsLastPID = "/proc/sys/kernel/ns_last_pid"
	pidMaxSys = "/proc/sys/kernel/pid_max"
	// reservedPIDs is where the kernel's pid allocation resumes after it
	// wraps past pid_max (RESERVED_PIDS in kernel/pid.c).
	reservedPIDs = 300
	// steerGap keeps the target clear of the pids just handed out.
	steerGap = 200
)

// pidTarget picks the pid to steer the next fork to: the first free pid
// from last+gap on, below pidMax. Past pidMax it wraps to the low pids, as
// the kernel does, so a counter near pid_max is no problem: ns_last_pid
// takes only values up to pid_max. ok is false when no pid is free.
func pidTarget(last, pidMax, gap int, used func(int) bool) (int, bool) {
	span := pidMax - reservedPIDs
	if span <= 0 || gap < 0 {
		return 0, false
	}
	for i := range span {
		p := last + gap + i
		if p >= pidMax {
			p = reservedPIDs + (p-pidMax)%span
		}
		if p > 1 && !used(p) {
			return p, true
		}
	}
	return 0, false
}

// pidSteer steers the host's pid counter and puts it back where the test
// found it when the steering wrapped it past pid_max, so the machine hands
// out pids from where it was.
type pidSteer struct{ pidMax int }

func newPIDSteer(t testing.TB) *pidSteer {
	t.Helper()
	pidMax, err := readSysInt(pidMaxSys)
	if err != nil {
		t.Fatal(err)
	}
	orig, err := readSysInt(nsLastPID)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if now, err := readSysInt(nsLastPID); err == nil && now < orig {
			// Wrapped by the test: back to where the kernel was going.
			if err := os.WriteFile(nsLastPID, []byte(strconv.Itoa(orig)), 0); err != nil {
				t.Errorf("restoring %s to %d: %v", nsLastPID, orig, err)
			}
		}
	})
	return &pidSteer{pidMax: pidMax}
}

// pick returns a free pid the next fork can be steered to.
func (s *pidSteer) pick(t testing.TB) uint32 {
	t.Helper()
	last, err := readSysInt(nsLastPID)
	if err != nil {
		t.Fatal(err)
	}
	p, ok := pidTarget(last, s.pidMax, steerGap, pidInUse)
	if !ok {
		t.Fatalf("no free pid below pid_max %d", s.pidMax)
	}
	t.Logf("steering to pid %d (counter at %d, pid_max %d)", p, last, s.pidMax)
	return uint32(p)
}

// aim makes target the next pid the kernel hands out (unless another
// process forks first: the caller checks and tries again).
func (s *pidSteer) aim(t testing.TB, target uint32) {
	t.Helper()
	if err := os.WriteFile(nsLastPID, []byte(strconv.Itoa(int(target)-1)), 0); err != nil {
		t.Fatalf("steering pid allocation to %d: %v", target, err)
	}
}

// pidInUse reports whether a task (process or thread) holds pid p.
func pidInUse(p int) bool {
	_, err := os.Stat("/proc/" + strconv.Itoa(p))
	return !errors.Is(err, os.ErrNotExist)
}

func readSysInt(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

// TestPIDTarget: the target stays below pid_max and wraps as the kernel
// does, skipping pids in use.
func TestPIDTarget(t *testing.T) {
	none := func(int) bool { return false }
	usedSet := func(ps ...int) func(int) bool {
		return func(p int) bool {
			for _, u := range ps {
				if u == p {
					return true
				}
			}
			return false
		}
	}
	cases := []struct {
		name           string
		last, max, gap int
		used           func(int) bool
		want           int
		ok             bool
	}{
		{"room ahead", 25000, 32768, 200, none, 25200, true},
		{"skips used", 25000, 32768, 200, usedSet(25200, 25201), 25202, true},
		{"counter near pid_max wraps", 32763, 32768, 200, none, reservedPIDs + 195, true},
		{"counter at pid_max wraps", 32768, 32768, 200, none, reservedPIDs + 200, true},
		{"last pid below pid_max", 32568, 32768, 199, none, 32767, true},
		{"wrapped target used", 32763, 32768, 200, usedSet(reservedPIDs + 195), reservedPIDs + 196, true},
		{"all used", 100, 400, 0, func(int) bool { return true }, 0, false},
	}
	for _, tc := range cases {
		got, ok := pidTarget(tc.last, tc.max, tc.gap, tc.used)
		if got != tc.want || ok != tc.ok {
			t.Errorf("%s: pidTarget(%d, %d) = %d %v, want %d %v", tc.name, tc.last, tc.max, got, ok, tc.want, tc.ok)
		}
		if ok && (got >= tc.max || got-1 > tc.max) {
			t.Errorf("%s: %d cannot be steered to under pid_max %d", tc.name, got, tc.max)
		}
	}
}
