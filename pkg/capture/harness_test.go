package capture

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/execid/correlator/internal/testutil"
)

// harness is a probe loaded into the real kernel, attached, with every
// decoded event collected for the test to search.
type harness struct {
	t      testing.TB
	p      *Probe
	cfg    Config
	mu     sync.Mutex
	events []Event
	done   chan struct{}
	cancel context.CancelFunc
}

// testPinPath returns a fresh bpffs directory removed after the test.
func testPinPath(t testing.TB) string {
	testutil.EnsureBPFFS(t)
	dir := filepath.Join(testutil.BPFFSPath, fmt.Sprintf("correlator-test-%d-%d", os.Getpid(), time.Now().UnixNano()))
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func newHarness(t testing.TB, mutate func(*Config)) *harness {
	t.Helper()
	testutil.RequireRoot(t)
	cfg := Default()
	cfg.PinPath = testPinPath(t)
	if mutate != nil {
		mutate(&cfg)
	}
	return startHarness(t, cfg)
}

// allScope has a harness send host execs without a key (ScopeAll), for
// tests about something else that use plain host processes.
func allScope(c *Config) { c.Scope = ScopeAll }

func startHarness(t testing.TB, cfg Config) *harness {
	t.Helper()
	return startBuild(t, cfg, testBuild(t))
}

// objectEnv forces the suite's BPF object (auto, default or compat), so a
// kernel that loads both can run the suite with either:
// CORRELATOR_BPF_OBJECT=compat go test ./pkg/capture/.
const objectEnv = "CORRELATOR_BPF_OBJECT"

// testBuild is the object the suite runs with: Load's choice, or objectEnv's.
func testBuild(t testing.TB) build {
	t.Helper()
	want := Object(os.Getenv(objectEnv))
	b, err := chooseBuild(want)
	if err != nil {
		t.Fatalf("choosing the BPF object (%s=%q): %v", objectEnv, want, err)
	}
	return b
}

// startBuild is startHarness with another BPF object (the handover test's
// second layout).
func startBuild(t testing.TB, cfg Config, b build) *harness {
	t.Helper()
	p, err := load(cfg, zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.InfoLevel), b)
	if err != nil {
		t.Fatalf("loading probe: %v", err)
	}
	if err := p.Attach(); err != nil {
		p.Close()
		t.Fatalf("attaching probe: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h := &harness{t: t, p: p, cfg: cfg, done: make(chan struct{}), cancel: cancel}
	go func() {
		defer close(h.done)
		if err := p.Run(ctx, h.add, nil); err != nil {
			t.Errorf("running probe: %v", err)
		}
	}()
	t.Cleanup(h.stop)
	return h
}

func (h *harness) add(ev Event) {
	h.mu.Lock()
	h.events = append(h.events, ev)
	h.mu.Unlock()
}

// stop detaches and closes the probe; pinned lineage stays for a restart.
func (h *harness) stop() {
	select {
	case <-h.done:
		return
	default:
	}
	h.cancel()
	<-h.done
	if err := h.p.Close(); err != nil {
		h.t.Errorf("closing probe: %v", err)
	}
}

// waitFor returns the first event matching pred, waiting for it to arrive.
// The bound (testutil.EventuallyBound) only stops a broken test from
// hanging; nothing is timed.
func (h *harness) waitFor(what string, pred func(Event) bool) Event {
	h.t.Helper()
	var found Event
	testutil.EventuallyNil(h.t, func() error {
		h.mu.Lock()
		defer h.mu.Unlock()
		for _, ev := range h.events {
			if pred(ev) {
				found = ev
				return nil
			}
		}
		return fmt.Errorf("no event %s among %d events", what, len(h.events))
	})
	return found
}

// all returns the events matching pred collected so far.
func (h *harness) all(pred func(Event) bool) []Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []Event
	for _, ev := range h.events {
		if pred(ev) {
			out = append(out, ev)
		}
	}
	return out
}

// execOf matches the exec event of pid.
func execOf(pid int) func(Event) bool {
	return func(ev Event) bool { return ev.Kind == KindExec && ev.PID == uint32(pid) }
}

// execWithArg matches an exec whose argv contains tok.
func execWithArg(tok string) func(Event) bool {
	return func(ev Event) bool {
		if ev.Kind != KindExec {
			return false
		}
		for _, a := range ev.Argv {
			if strings.Contains(a, tok) {
				return true
			}
		}
		return false
	}
}

// spawn fork+execs argv with exactly env (no dedup, unlike os/exec) and
// returns the pid and a wait function.
func spawn(t testing.TB, argv, env []string) (int, func() syscall.WaitStatus) {
	t.Helper()
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	fd := null.Fd()
	pid, err := syscall.ForkExec(argv[0], argv, &syscall.ProcAttr{Env: env, Files: []uintptr{fd, fd, fd}})
	if err != nil {
		t.Fatalf("spawning %v: %v", argv, err)
	}
	var once sync.Once
	var ws syscall.WaitStatus
	wait := func() syscall.WaitStatus {
		once.Do(func() {
			for {
				_, err := syscall.Wait4(pid, &ws, 0, nil)
				if err != syscall.EINTR {
					return
				}
			}
		})
		return ws
	}
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL); wait() })
	return pid, wait
}

// run spawns and waits.
func run(t testing.TB, argv, env []string) int {
	pid, wait := spawn(t, argv, env)
	if ws := wait(); ws.ExitStatus() != 0 {
		t.Fatalf("%v exited with %v", argv, ws)
	}
	return pid
}

const keyName = "KUBERNETES_EXEC_AUDIT_ID"

func keyEnv(id string) string { return keyName + "=" + id }

// baseEnv is a small ordinary environment.
func baseEnv() []string { return []string{"PATH=/usr/bin:/bin", "HOME=/root", "LANG=C"} }

// bigEnv builds n bytes of service-link-like variables.
func bigEnv(n int) []string {
	var env []string
	for i, size := 0, 0; size < n; i++ {
		v := fmt.Sprintf("SVC_%05d_SERVICE_PORT_HTTP_TCP_ADDR=10.%d.%d.%d", i, i%250, (i/250)%250, i%7)
		env = append(env, v)
		size += len(v) + 1
	}
	return env
}

func wantFlags(t testing.TB, ev Event, want ...string) {
	t.Helper()
	for _, f := range want {
		if !ev.HasFlag(f) {
			t.Errorf("event pid %d %v: flags %v lack %s", ev.PID, ev.Argv, ev.Flags, f)
		}
	}
}

func noFlags(t testing.TB, ev Event, unwanted ...string) {
	t.Helper()
	for _, f := range unwanted {
		if ev.HasFlag(f) {
			t.Errorf("event pid %d %v: flags %v have %s", ev.PID, ev.Argv, ev.Flags, f)
		}
	}
}
