package capture

import (
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"

	"github.com/execid/correlator/internal/testutil"
	"github.com/execid/correlator/pkg/vocab"
)

// TestKernelRestart stops the agent while a session runs and starts a new
// one on the same pinned lineage: a process started before the restart
// still resolves to its session.
func TestKernelRestart(t *testing.T) {
	testutil.RequireRoot(t)
	cfg := Default()
	cfg.PinPath = testPinPath(t)
	id := testutil.RandomUUID()
	tok := "restart-" + id[:8]

	first := startHarness(t, cfg)
	if first.p.Resumed() {
		t.Fatal("a fresh pin path reported resumed state")
	}
	fifo, release := gate(t)
	root, wait := spawn(t, []string{"/bin/sh", "-c", "read x < " + fifo + "; exec /bin/echo " + tok}, []string{keyEnv(id), "PATH=/bin"})
	first.waitFor("session root", execOf(root))
	first.stop()

	second := startHarness(t, cfg)
	if !second.p.Resumed() {
		t.Fatal("restart did not find the pinned lineage")
	}
	boot, err := second.p.Bootstrap()
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range boot {
		if ev.PID == uint32(root) {
			t.Errorf("bootstrap re-added pid %d although the kernel's entry survived", root)
		}
	}
	release()
	wait()
	ev := second.waitFor("exec after the restart", func(e Event) bool {
		return execWithArg(tok)(e) && e.Filename == "/bin/echo"
	})
	if ev.AuditID != id || ev.Source != vocab.SourceInherited {
		t.Errorf("after restart: auditID %q source %q, want %s inherited", ev.AuditID, ev.Source, id)
	}
	noFlags(t, ev, vocab.FlagStaleLineage, vocab.FlagProcfsRoot) // positive control: pinned, not procfs
	// The image places are pinned too: the shell's place, recorded by the
	// first probe, still judges its exec (a lost place reads unknown).
	if ev.ExecOrigin != OriginInside {
		t.Errorf("after restart: exec origin %q, want %q from the pinned image place", ev.ExecOrigin, OriginInside)
	}
}

// TestKernelColdStart starts a session before any agent, then an agent
// with nothing pinned: it bootstraps the session from /proc.
func TestKernelColdStart(t *testing.T) {
	testutil.RequireRoot(t)
	id := testutil.RandomUUID()
	tok := "cold-" + id[:8]
	fifo, release := gate(t)
	root, wait := spawn(t, []string{"/bin/sh", "-c", "read x < " + fifo + "; exec /bin/echo " + tok}, []string{keyEnv(id), "PATH=/bin"})

	h := newHarness(t, nil)
	if h.p.Resumed() {
		t.Fatal("fresh pin path reported resumed state")
	}
	boot, err := h.p.Bootstrap()
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, ev := range boot {
		if ev.PID == uint32(root) {
			found = true
			if ev.AuditID != id || ev.Source != vocab.SourceProcfs {
				t.Errorf("bootstrapped root: auditID %q source %q", ev.AuditID, ev.Source)
			}
			wantFlags(t, ev, vocab.FlagProcfsRoot) // nobody saw it exec'd
		}
	}
	if !found {
		t.Fatalf("bootstrap did not report pid %d", root)
	}
	release()
	wait()
	ev := h.waitFor("exec after bootstrap", func(e Event) bool { return execWithArg(tok)(e) && e.Filename == "/bin/echo" })
	if ev.AuditID != id || ev.Source != vocab.SourceProcfs {
		t.Errorf("exec after bootstrap: auditID %q source %q, want %s procfs", ev.AuditID, ev.Source, id)
	}
	wantFlags(t, ev, vocab.FlagProcfsRoot) // the flag stays in the lineage
	if h.p.ProcfsRoots() == 0 {
		t.Error("the procfs root was not counted")
	}
	// Nothing was pinned and the shell predates the probe: where its image
	// was loaded is not known, and the kernel says so.
	if ev.ExecOrigin != OriginUnknown {
		t.Errorf("exec after a cold start: exec origin %q, want %q", ev.ExecOrigin, OriginUnknown)
	}
}

// gate makes a FIFO a shell can block on with its builtin read (no exec, so
// no event), until release opens it: the test, not a timer, says when the
// shell goes on, however slow the restart.
func gate(t *testing.T) (string, func()) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "gate")
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	release := func() {
		once.Do(func() {
			f, err := os.OpenFile(path, os.O_WRONLY, 0)
			if err != nil {
				t.Fatalf("opening the gate: %v", err)
			}
			defer f.Close()
			if _, err := f.WriteString("go\n"); err != nil {
				t.Fatalf("opening the gate: %v", err)
			}
		})
	}
	return path, release
}
