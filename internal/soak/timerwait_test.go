package soak

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/execid/correlator/internal/testutil"
)

func TestParseSchedstat(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want cpuTime
		err  string
	}{
		{"5427394 120033 31\n", cpuTime{ran: 5427394, waited: 120033}, ""},
		{"0 0 0", cpuTime{}, ""},
		{"5427394 120033\n", cpuTime{}, "2 fields"},
		{"5427394 12x 31\n", cpuTime{}, "run_delay \"12x\" is not a count"},
		{"54y 12 31\n", cpuTime{}, "run time \"54y\" is not a count"},
		{"1 -5 2\n", cpuTime{}, "not a count"},
		{"-1 5 2\n", cpuTime{}, "not a count"},
		{"", cpuTime{}, "0 fields"},
	} {
		got, err := parseSchedstat([]byte(tc.in))
		if got != tc.want || (err == nil) != (tc.err == "") || err != nil && !strings.Contains(err.Error(), tc.err) {
			t.Errorf("parseSchedstat(%q) = %+v, %v; want %+v, %q", tc.in, got, err, tc.want, tc.err)
		}
	}
}

// FuzzParseSchedstat: any bytes give times of at least zero or an error.
func FuzzParseSchedstat(f *testing.F) {
	f.Add([]byte("5427394 120033 31\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if c, err := parseSchedstat(b); err == nil && (c.ran < 0 || c.waited < 0) {
			t.Fatalf("parseSchedstat(%q) = %+v", b, c)
		}
	})
}

// TestRunDelayCountsAWait: a thread that shares its one CPU with a busy
// one waits for it, and runDelay counts that wait; the control, the same
// spin before the busy thread starts, is what it is compared with.
func TestRunDelayCountsAWait(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var one unix.CPUSet
	one.Set(0)
	if err := unix.SchedSetaffinity(0, &one); err != nil {
		t.Fatalf("pinning the test's thread to CPU 0: %v", err)
	}
	spin := func(d time.Duration) time.Duration {
		before, err := runDelay()
		if err != nil {
			t.Fatal(err)
		}
		for end := time.Now().Add(d); time.Now().Before(end); {
		}
		after, err := runDelay()
		if err != nil {
			t.Fatal(err)
		}
		return after - before
	}
	alone := spin(100 * time.Millisecond)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var started atomic.Bool
	go func() {
		runtime.LockOSThread() // the thread exits with the goroutine
		if unix.SchedSetaffinity(0, &one) != nil {
			return
		}
		started.Store(true)
		for ctx.Err() == nil {
		}
	}()
	for !started.Load() {
		runtime.Gosched()
	}
	// Sharing CPU 0 with the busy thread, 100 ms of spinning waits for
	// about half of it; the wait must show, and be more than alone.
	var shared time.Duration
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
		if shared = spin(100 * time.Millisecond); shared > alone+10*time.Millisecond {
			return
		}
	}
	t.Fatalf("runDelay counted %s sharing a CPU with a busy thread, %s alone: it does not see the wait", shared, alone)
}

// TestTimerRaised: the timer the soak starts runs at timerNice, every
// thread of it and its session's autogroup where the kernel has them;
// the test's own process, the control, is not raised.
func TestTimerRaised(t *testing.T) {
	testutil.RequireRoot(t)
	tm, err := startTimer(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	defer tm.close()
	// Its first answer comes after it raised itself.
	if _, err := tm.get("http://127.0.0.1:1/nothing-listens"); err == nil {
		t.Fatal("GET on a closed port: no error")
	}
	pid := tm.cmd.Process.Pid
	nices := func(pid int) []int {
		stats, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
		if err != nil || len(stats) == 0 {
			t.Fatalf("listing the threads of %d: %v", pid, err)
		}
		var out []int
		for _, p := range stats {
			b, err := os.ReadFile(p)
			if err != nil {
				continue // exited
			}
			// The nice value is the 19th field, the 17th after the ")"
			// that ends the command's name.
			f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
			n, err := strconv.Atoi(f[16])
			if err != nil {
				t.Fatalf("reading %s: %v", p, err)
			}
			out = append(out, n)
		}
		return out
	}
	for _, n := range nices(pid) {
		if n != timerNice {
			t.Fatalf("the timer's threads at nice %v, want all at %d", nices(pid), timerNice)
		}
	}
	if slices.Contains(nices(os.Getpid()), timerNice) {
		t.Fatalf("the test's own threads at nice %v: the control is raised too", nices(os.Getpid()))
	}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/autogroup", pid)); err == nil && !strings.HasSuffix(strings.TrimSpace(string(b)), fmt.Sprintf("nice %d", timerNice)) {
		t.Fatalf("the timer's autogroup: %q, want nice %d", b, timerNice)
	}
}
