package capture

import (
	"os"
	"runtime"
	"strconv"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/execid/correlator/internal/testutil"
	"github.com/execid/correlator/pkg/vocab"
)

const helperEnv = "CORRELATOR_TEST_HELPER"

// TestMain lets the test binary act as a helper process: a child forked
// from a non-leader thread needs a multi-threaded parent we control.
func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "thread-fork" {
		os.Exit(threadForkHelper())
	}
	os.Exit(m.Run())
}

// threadForkHelper forks+execs /bin/true from a thread that is not the
// group leader, then exits.
func threadForkHelper() int {
	res := make(chan int)
	for i := 0; i < 8; i++ {
		go forkFromThread(res)
	}
	return <-res
}

func forkFromThread(res chan<- int) {
	runtime.LockOSThread() // never unlocked: the thread dies with the process
	if unix.Gettid() == unix.Getpid() {
		select {} // the leader: hold it so the other goroutines land elsewhere
	}
	{
		pid, err := syscall.ForkExec("/bin/true", []string{"/bin/true", "thread-child"}, &syscall.ProcAttr{Env: []string{"PATH=/bin"}})
		if err != nil {
			res <- 4
			return
		}
		var ws syscall.WaitStatus
		syscall.Wait4(pid, &ws, 0, nil)
		res <- 0
	}
}

func TestKernelLineage(t *testing.T) {
	h := newHarness(t, nil)

	t.Run("children and grandchildren", func(t *testing.T) {
		id := testutil.RandomUUID()
		tok := "gc-" + id[:8]
		root := run(t, []string{"/bin/sh", "-c", "/bin/sh -c '/bin/echo " + tok + "; true'; /bin/true " + tok}, []string{keyEnv(id), "PATH=/bin"})
		gc := h.waitFor("grandchild echo", func(e Event) bool { return execWithArg(tok)(e) && e.Filename == "/bin/echo" })
		rootEv := h.waitFor("root exec", execOf(root))
		h.waitFor("child true", func(e Event) bool { return execWithArg(tok)(e) && e.Filename == "/bin/true" })
		if rootEv.Source != vocab.SourceEnv || rootEv.AuditID != id {
			t.Errorf("root: auditID %q source %q", rootEv.AuditID, rootEv.Source)
		}
		for _, ev := range h.all(execWithArg(tok)) {
			if ev.PID == uint32(root) {
				continue
			}
			if ev.AuditID != id || ev.Source != vocab.SourceInherited || ev.SessionRootID != rootEv.ProcessID {
				t.Errorf("%v: auditID %q source %q root %q, want %s inherited from %s", ev.Argv, ev.AuditID, ev.Source, ev.SessionRootID, id, rootEv.ProcessID)
			}
		}
		if gc.Depth < 2 {
			t.Errorf("grandchild depth %d, want >= 2", gc.Depth)
		}
	})

	t.Run("double-forked daemon reparented", func(t *testing.T) {
		id := testutil.RandomUUID()
		tok := "daemon-" + id[:8]
		root := run(t, []string{"/bin/sh", "-c", "(/bin/sh -c 'sleep 0.3; exec /bin/echo " + tok + "' &); exit 0"}, []string{keyEnv(id), "PATH=/bin:/usr/bin"})
		ev := h.waitFor("daemon's exec", execWithArg(tok))
		if ev.Filename != "/bin/echo" {
			ev = h.waitFor("daemon's echo", func(e Event) bool { return execWithArg(tok)(e) && e.Filename == "/bin/echo" })
		}
		if ev.AuditID != id || ev.Source != vocab.SourceInherited {
			t.Errorf("daemon: auditID %q source %q, want %s inherited", ev.AuditID, ev.Source, id)
		}
		if ev.PPID == uint32(root) {
			t.Errorf("daemon was not reparented (ppid %d is the root)", ev.PPID)
		}
	})

	t.Run("child of a non-leader thread", func(t *testing.T) {
		id := testutil.RandomUUID()
		exe, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		helper := run(t, []string{exe, "-test.run=^$"}, []string{keyEnv(id), helperEnv + "=thread-fork"})
		ev := h.waitFor("thread's child", func(e Event) bool { return execWithArg("thread-child")(e) && e.PPID == uint32(helper) })
		if ev.AuditID != id || ev.Source != vocab.SourceInherited {
			t.Errorf("thread child: auditID %q source %q, want %s inherited", ev.AuditID, ev.Source, id)
		}
	})

	t.Run("entry dropped at group exit", func(t *testing.T) {
		id := testutil.RandomUUID()
		pid := run(t, []string{"/bin/true"}, []string{keyEnv(id)})
		exit := h.waitFor("exit", func(e Event) bool { return e.Kind == KindExit && e.PID == uint32(pid) })
		if exit.AuditID != id || exit.ExitCode == nil || *exit.ExitCode != 0 {
			t.Errorf("exit event %+v", exit)
		}
		var l correlatorLineage
		if err := h.p.objs.LineageMap.Lookup(uint32(pid), &l); err == nil {
			t.Errorf("lineage entry for exited pid %d still present", pid)
		}
	})
}

func TestKernelTampering(t *testing.T) {
	h := newHarness(t, nil)
	id, other := testutil.RandomUUID(), testutil.RandomUUID()
	tok := "tamper-" + id[:8]
	root := run(t, []string{"/bin/sh", "-c",
		"env -u " + keyName + " sh -c 'ls / >/dev/null; echo removed-" + tok + "'; " +
			keyName + "=" + other + " sh -c 'echo mismatch-" + tok + "'; true"},
		[]string{keyEnv(id), "PATH=/usr/bin:/bin"})

	isShell := func(marker string) func(Event) bool {
		return func(e Event) bool {
			return execWithArg(marker)(e) && e.PID != uint32(root) && len(e.Argv) > 0 && e.Argv[0] == "sh"
		}
	}
	removed := h.waitFor("sh without the key", isShell("removed-"+tok))
	if removed.AuditID != id {
		t.Errorf("env -u: auditID %q, want the original %s", removed.AuditID, id)
	}
	wantFlags(t, removed, vocab.FlagEnvRemoved)
	ls := h.waitFor("ls below the stripped shell", func(e Event) bool {
		return e.Kind == KindExec && e.PPID == removed.PID && e.Filename == "/usr/bin/ls"
	})
	if ls.AuditID != id {
		t.Errorf("ls below env -u: auditID %q, want %s", ls.AuditID, id)
	}
	wantFlags(t, ls, vocab.FlagEnvRemoved)

	mismatch := h.waitFor("sh with another ID", isShell("mismatch-"+tok))
	if mismatch.AuditID != id || mismatch.ClaimedAuditID != other {
		t.Errorf("override: auditID %q claimed %q, want %s claimed %s", mismatch.AuditID, mismatch.ClaimedAuditID, id, other)
	}
	wantFlags(t, mismatch, vocab.FlagEnvMismatch)
}

// TestKernelPIDReuse plants the entry of a dead process under a pid, makes
// the kernel hand that pid to a fresh process, and checks the newcomer does
// not inherit the dead session. The control: an entry under a steered pid
// that carries the start time of the process now holding it is inherited,
// so the start time, not the pid, is what told them apart. The pid counter
// may be anywhere, pid_max near included (pidSteer wraps as the kernel does).
func TestKernelPIDReuse(t *testing.T) {
	h := newHarness(t, allScope) // the reused pid carries no key
	steer := newPIDSteer(t)
	dead := testutil.RandomUUID()
	session := func(start uint64, coarse bool, target uint32) correlatorLineage {
		e := correlatorLineage{StartNs: start, RootTgid: target, RootStartNs: start}
		if coarse {
			e.Lflags = uint32(correlatorLineageFlagLINEAGE_FLAG_COARSE_START)
		}
		e.Ids[0].Len = uint16(copy(e.Ids[0].Value[:], dead))
		e.Ids[0].Source = uint8(correlatorIdSourceID_SOURCE_ENV)
		return e
	}

	t.Run("a dead process's entry is not inherited", func(t *testing.T) {
		for attempt := 0; attempt < 20; attempt++ {
			target := steer.pick(t)
			stale := session(12345, false, target)
			if err := h.p.objs.LineageMap.Put(target, &stale); err != nil {
				t.Fatal(err)
			}
			steer.aim(t, target)
			pid := run(t, []string{"/bin/sh", "-c", "/bin/true; true"}, []string{"PATH=/bin"})
			if uint32(pid) != target {
				h.p.objs.LineageMap.Delete(target)
				continue // another process took the pid; try again
			}
			ev := h.waitFor("exec under the reused pid", execOf(pid))
			if ev.AuditID != "" {
				t.Errorf("reused pid inherited dead session %q", ev.AuditID)
			}
			wantFlags(t, ev, vocab.FlagStaleLineage)
			child := h.waitFor("child of the reused pid", func(e Event) bool { return e.Kind == KindExec && e.PPID == target })
			if child.AuditID != "" {
				t.Errorf("child of reused pid inherited %q", child.AuditID)
			}
			return
		}
		t.Fatal("could not steer a pid in 20 attempts")
	})

	t.Run("control: the entry of the pid's own process is inherited", func(t *testing.T) {
		tok := "pid-control-" + dead[:8]
		for attempt := 0; attempt < 20; attempt++ {
			target := steer.pick(t)
			steer.aim(t, target)
			// The shell waits on stdin, so its entry is in place before it forks.
			pid, release := spawnWaiting(t, []string{"/bin/sh", "-c", "read go; /bin/true " + tok + "; true"}, []string{"PATH=/bin"})
			if uint32(pid) != target {
				release()
				continue
			}
			b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
			if err != nil {
				t.Fatal(err)
			}
			_, ticks, err := parseStat(b)
			if err != nil {
				t.Fatal(err)
			}
			live := session(ticks*ticksNs, true, target)
			if err := h.p.objs.LineageMap.Put(target, &live); err != nil {
				t.Fatal(err)
			}
			release()
			child := h.waitFor("child of the pid's own process", func(e Event) bool {
				return e.Kind == KindExec && e.PPID == target && len(e.Argv) == 2 && e.Argv[1] == tok
			})
			if child.AuditID != dead || child.Source != vocab.SourceInherited {
				t.Errorf("child of the entry's own process: auditID %q source %q, want %s inherited", child.AuditID, child.Source, dead)
			}
			noFlags(t, child, vocab.FlagStaleLineage)
			return
		}
		t.Fatal("could not steer a pid in 20 attempts")
	})
}

// spawnWaiting starts argv with stdin a pipe; release closes the pipe's
// write end (the process reads EOF) and waits for it to exit.
func spawnWaiting(t *testing.T, argv, env []string) (int, func()) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	pid, err := syscall.ForkExec(argv[0], argv, &syscall.ProcAttr{Env: env, Files: []uintptr{r.Fd(), null.Fd(), null.Fd()}})
	r.Close()
	if err != nil {
		w.Close()
		t.Fatalf("spawning %v: %v", argv, err)
	}
	var ws syscall.WaitStatus
	done := false
	release := func() {
		if done {
			return
		}
		done = true
		w.Close()
		for {
			if _, err := syscall.Wait4(pid, &ws, 0, nil); err != syscall.EINTR {
				return
			}
		}
	}
	t.Cleanup(func() {
		if !done {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		release()
	})
	return pid, release
}
