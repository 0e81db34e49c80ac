package capture

import (
	"errors"
	"os"
	"os/exec"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/cilium/ebpf/rlimit"
	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/execid/correlator/internal/testutil"
)

// TestLoadLiftsMemlockFirst: Load lifts RLIMIT_MEMLOCK before anything
// touches BPF. chooseBuild's feature probes create maps and programs, and
// before 5.11 each is charged against the limit: probed first, a capture
// started at the distributions' 64 KiB, beside an agent, was refused with
// "kernel feature missing: map type Array (map .bss): ... operation not
// permitted (MEMLOCK may be too low)". No root: the steps are recorded.
func TestLoadLiftsMemlockFirst(t *testing.T) {
	var got []string
	steps := func(memlockErr error) loadSteps {
		got = nil
		return loadSteps{
			preflight:     func() error { got = append(got, "preflight"); return nil },
			removeMemlock: func() error { got = append(got, "memlock"); return memlockErr },
			choose: func(o Object) (build, error) {
				got = append(got, "choose")
				return build{name: "recorded"}, nil
			},
			load: func(Config, zerolog.Logger, build) (*Probe, error) {
				got = append(got, "load")
				return &Probe{}, nil
			},
		}
	}

	if _, err := steps(nil).run(Default(), zerolog.Nop()); err != nil {
		t.Fatal(err)
	}
	if want := []string{"preflight", "memlock", "choose", "load"}; !slices.Equal(got, want) {
		t.Errorf("Load's steps: %v, want %v", got, want)
	}

	refused := errors.New("operation not permitted")
	_, err := steps(refused).run(Default(), zerolog.Nop())
	if !errors.Is(err, refused) || !strings.Contains(err.Error(), "removing memlock rlimit") {
		t.Errorf("Load with the limit not lifted: error %v, want it wrapped as removing memlock rlimit", err)
	}
	if want := []string{"preflight", "memlock"}; !slices.Equal(got, want) {
		t.Errorf("Load with the limit not lifted went on to %v, want only %v", got, want)
	}

	// And Load runs these steps with the real functions.
	k := kernelSteps()
	for _, c := range []struct {
		name      string
		got, want any
	}{
		{"preflight", k.preflight, Preflight},
		{"removeMemlock", k.removeMemlock, rlimit.RemoveMemlock},
		{"choose", k.choose, chooseBuild},
		{"load", k.load, load},
	} {
		if reflect.ValueOf(c.got).Pointer() != reflect.ValueOf(c.want).Pointer() {
			t.Errorf("kernelSteps().%s is not the kernel's", c.name)
		}
	}
}

// memlockChildEnv makes the test binary, re-run by
// TestKernelLoadUnderDefaultMemlock, the capture started at a low limit.
const memlockChildEnv = "CORRELATOR_TEST_MEMLOCK_CHILD"

// defaultMemlock is RLIMIT_MEMLOCK as Debian 11 (5.10) leaves it: 64 KiB.
const defaultMemlock = 64 << 10

// TestKernelLoadUnderDefaultMemlock starts a capture, unpinned as `correlator
// capture` starts, in a process whose RLIMIT_MEMLOCK is 64 KiB (soft and
// hard), while this process holds a loaded probe: before 5.11 the limit is
// checked against root's locked memory, which this probe's maps already
// exceed, so every BPF object the child creates before lifting the limit
// is refused. Load must lift it first and load.
//
// From 5.11 BPF memory is charged to the memory cgroup, not the limit: the
// child loads with or without the fix, and the test says so in its log.
// What it proves there is only that Load does not trip over a low limit;
// the order itself is TestLoadLiftsMemlockFirst's. scripts/e2e-kernels runs
// it on 5.10 (at the distribution's limit) where it fails without the fix.
func TestKernelLoadUnderDefaultMemlock(t *testing.T) {
	testutil.RequireRoot(t)
	if os.Getenv(memlockChildEnv) != "" {
		memlockChild(t)
		return
	}
	p, err := Load(unpinned(), zerolog.Nop())
	if err != nil {
		t.Fatalf("loading the probe held during the child's load: %v", err)
	}
	defer p.Close()

	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^TestKernelLoadUnderDefaultMemlock$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), memlockChildEnv+"=1")
	out, err := cmd.CombinedOutput()
	t.Logf("child (RLIMIT_MEMLOCK %d KiB):\n%s", defaultMemlock>>10, out)
	if err != nil {
		t.Fatalf("Load at RLIMIT_MEMLOCK %d KiB beside a loaded probe: %v", defaultMemlock>>10, err)
	}
}

// unpinned is the default configuration as `correlator capture` loads it
// (no --pin): nothing is left under a pin path.
func unpinned() Config {
	c := Default()
	c.PinPath = ""
	return c
}

// memlockChild lowers its own limit, then loads as a capture does.
func memlockChild(t *testing.T) {
	low := unix.Rlimit{Cur: defaultMemlock, Max: defaultMemlock}
	if err := unix.Setrlimit(unix.RLIMIT_MEMLOCK, &low); err != nil {
		t.Fatalf("lowering RLIMIT_MEMLOCK: %v", err)
	}
	p, err := Load(unpinned(), zerolog.Nop())
	if err != nil {
		t.Fatalf("loading: %v", err)
	}
	defer p.Close()
	var after unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &after); err != nil {
		t.Fatal(err)
	}
	if after.Cur == unix.RLIM_INFINITY {
		t.Logf("memlock: %s: Load lifted RLIMIT_MEMLOCK (BPF memory charged to it: before 5.11), object %s loaded", kernelRelease(), p.Object())
	} else {
		t.Logf("memlock: %s: RLIMIT_MEMLOCK left at %d KiB (BPF memory charged to the memory cgroup: 5.11 or later; the limit cannot refuse a load here), object %s loaded", kernelRelease(), after.Cur>>10, p.Object())
	}
}
