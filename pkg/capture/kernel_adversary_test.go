package capture

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/execid/correlator/internal/testutil"
	"github.com/execid/correlator/pkg/vocab"
)

// The adversary: code inside a pod with no exec session of its own reads a
// live session's audit ID and starts commands carrying it. Every forgery
// must come out root_unverified on every process that carries the borrowed
// ID; every positive control runs the same shape of command as a genuine
// runtime exec and must come out verified, so a failure means the product
// is wrong, not the test.

// adversaryMain is the container's entrypoint: it waits for an ID on a
// fifo, then re-execs itself with that ID set (the main-process forgery).
const adversaryMain = `mkfifo /tmp/trig; read id < /tmp/trig; ` +
	`exec /bin/forger reexec ` + keyName + `=$id /bin/sh -c '/bin/echo reexec-main; exec /bin/sleep 86400'`

type adversary struct {
	t      *testing.T
	h      *harness
	c      *testutil.Container
	victim string // the live session's audit ID
	vpid   int    // the victim's sleep, as the container sees it
}

func newAdversary(t *testing.T) *adversary {
	h := newHarness(t, nil)
	c := testutil.NewContainer(t, testutil.ContainerConfig{
		Files: map[string]string{"/bin/forger": testutil.BuildForger(t)},
		Args:  []string{"/bin/sh", "-c", adversaryMain},
	})
	a := &adversary{t: t, h: h, c: c, victim: testutil.RandomUUID()}
	// The victim: a genuine session left running, whose environ the
	// intruder reads (same uid, so /proc/<pid>/environ is readable).
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	tok := "victim-" + a.victim[:8]
	go func() {
		defer close(done)
		_, _ = c.Exec(ctx, []string{"sh", "-c", "/bin/sleep 86400; true", tok}, keyEnv(a.victim))
	}()
	t.Cleanup(func() { cancel(); <-done })
	root := h.waitFor("victim session root", func(e Event) bool { return a.in(e) && execWithArg(tok)(e) })
	if root.AuditID != a.victim || root.HasFlag(vocab.FlagRootUnverified) || !root.ExecOrigin.Verified() {
		t.Fatalf("positive control: the victim's genuine root is auditID %q flags %v origin %q, want %s verified",
			root.AuditID, root.Flags, root.ExecOrigin, a.victim)
	}
	sleep := h.waitFor("victim's sleep", func(e Event) bool { return a.in(e) && e.PPID == root.PID && e.Filename == "/bin/sleep" })
	a.vpid = nsPID(t, int(sleep.PID))
	return a
}

func (a *adversary) in(e Event) bool { return e.Kind == KindExec && e.ContainerID == a.c.ID }

// exec runs a keyless runc exec: a process in the pod with no session.
func (a *adversary) exec(args ...string) {
	a.t.Helper()
	if out, err := a.c.Exec(context.Background(), args); err != nil {
		a.t.Fatalf("runc exec %q: %v: %s", args, err, out)
	}
}

// genuine runs a runc exec with id injected last, as containerd does.
func (a *adversary) genuine(id string, args ...string) {
	a.t.Helper()
	if out, err := a.c.Exec(context.Background(), args, keyEnv(id)); err != nil {
		a.t.Fatalf("runc exec %q: %v: %s", args, err, out)
	}
}

// forged waits for the forged root (filename, argv token) and its child
// running /bin/echo, and checks both carry the borrowed ID unverified.
func (a *adversary) forged(tok, rootFile string) Event {
	a.t.Helper()
	root := a.h.waitFor("forged root "+tok, func(e Event) bool {
		return a.in(e) && execWithArg(tok)(e) && e.Filename == rootFile && e.Source == vocab.SourceEnv
	})
	echo := a.h.waitFor("forged root's echo "+tok, func(e Event) bool {
		return a.in(e) && execWithArg(tok)(e) && e.Filename == "/bin/echo"
	})
	for _, ev := range []Event{root, echo} {
		if ev.AuditID != a.victim {
			a.t.Errorf("%s %v: carries %q, want the borrowed %s", tok, ev.Argv, ev.AuditID, a.victim)
		}
		wantFlags(a.t, ev, vocab.FlagRootUnverified)
	}
	if root.ExecOrigin.Verified() {
		a.t.Errorf("%s: forged root's exec origin %q reads as the runtime's", tok, root.ExecOrigin)
	}
	if echo.SessionRootID != root.ProcessID {
		a.t.Errorf("%s: echo's session root %q, want the forged root %s, not the victim's", tok, echo.SessionRootID, root.ProcessID)
	}
	return root
}

// verified waits for a genuine session's root and echo and checks that
// neither is flagged: the positive control of a forgery.
func (a *adversary) verified(tok, id string) {
	a.t.Helper()
	for _, file := range []string{"", "/bin/echo"} {
		ev := a.h.waitFor("genuine "+tok+" "+file, func(e Event) bool {
			return a.in(e) && execWithArg(tok)(e) && (file == "" && e.Source == vocab.SourceEnv || e.Filename == file)
		})
		if ev.AuditID != id {
			a.t.Errorf("positive control %s %v: auditID %q, want %s", tok, ev.Argv, ev.AuditID, id)
		}
		noFlags(a.t, ev, vocab.FlagRootUnverified, vocab.FlagEnvMismatch, vocab.FlagEnvRemoved)
	}
}

// nsPID maps a host PID to the PID the process has in its own namespace.
func nsPID(t testing.TB, hostPID int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", hostPID))
	if err != nil {
		t.Fatalf("reading status of pid %d: %v", hostPID, err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f, ok := strings.CutPrefix(line, "NSpid:"); ok {
			ids := strings.Fields(f)
			n, err := strconv.Atoi(ids[len(ids)-1])
			if err != nil {
				t.Fatalf("parsing NSpid %q: %v", f, err)
			}
			return n
		}
	}
	t.Fatalf("pid %d: no NSpid line", hostPID)
	return 0
}

// readEnviron is the intruder's first step in shell: the victim's ID from
// /proc/<pid>/environ.
func (a *adversary) readEnviron() string {
	return fmt.Sprintf(`ID=$(/bin/tr '\0' '\n' < /proc/%d/environ | /bin/sed -n 's/^%s=//p'); `, a.vpid, keyName)
}

func TestKernelAdversaryExecInPlace(t *testing.T) {
	a := newAdversary(t)
	own := testutil.RandomUUID()
	t.Run("exec env KEY=id sh -c", func(t *testing.T) {
		a.t = t
		a.exec("sh", "-c", a.readEnviron()+`exec /bin/env `+keyName+`=$ID /bin/sh -c '/bin/echo inplace-env; true'`)
		a.forged("inplace-env", "/bin/sh")
		// Control: the same exec in place inside a genuine session keeps it.
		a.genuine(own, "sh", "-c", `exec /bin/env `+keyName+`=$`+keyName+` /bin/sh -c '/bin/echo inplace-env-ok; true'`)
		a.verified("inplace-env-ok", own)
	})
	t.Run("busybox sh -c execs its last command in place", func(t *testing.T) {
		a.t = t
		a.exec("sh", "-c", a.readEnviron()+keyName+`=$ID /bin/sh -c '/bin/echo inplace-last; true'`)
		root := a.forged("inplace-last", "/bin/sh")
		if root.ExecOrigin != OriginRuntimeChild {
			t.Errorf("exec origin %q, want %q: the runtime's first image set the key", root.ExecOrigin, OriginRuntimeChild)
		}
		wantFlags(t, root, vocab.FlagRootIndirect)
	})
	t.Run("steal from /proc/pid/environ and exec", func(t *testing.T) {
		a.t = t
		a.exec("sh", "-c", fmt.Sprintf("/bin/forger steal %d %s /bin/sh -c '/bin/echo inplace-steal; true'; true", a.vpid, keyName))
		root := a.forged("inplace-steal", "/bin/sh")
		if root.ExecOrigin != OriginInside {
			t.Errorf("exec origin %q, want %q", root.ExecOrigin, OriginInside)
		}
	})
}

func TestKernelAdversaryMainReexec(t *testing.T) {
	a := newAdversary(t)
	a.exec("sh", "-c", "while [ ! -p /tmp/trig ]; do sleep 0.05; done; echo "+a.victim+" > /tmp/trig")
	root := a.forged("reexec-main", "/bin/sh")
	if root.PID != uint32(a.c.InitPID()) {
		t.Errorf("forged root pid %d, want the container's main process %d", root.PID, a.c.InitPID())
	}
	if root.ExecOrigin != OriginInside {
		t.Errorf("exec origin %q, want %q", root.ExecOrigin, OriginInside)
	}
	// The main process itself was started by the runtime as pid 1: an
	// entrypoint is never a verified exec, whatever its environment.
	start := a.h.all(func(e Event) bool { return a.in(e) && e.PID == uint32(a.c.InitPID()) && e.Filename == "/bin/sh" })
	if len(start) == 0 || start[0].ExecOrigin != OriginContainerInit {
		t.Errorf("container start: %v, want one exec with origin %q", start, OriginContainerInit)
	}
}

func TestKernelAdversaryCloneParent(t *testing.T) {
	a := newAdversary(t)
	a.exec("/bin/forger", "clone-parent", keyName+"="+a.victim, "/bin/sh", "-c", "/bin/echo clone-parent; true")
	forger := a.h.waitFor("the forger", func(e Event) bool { return a.in(e) && e.Filename == "/bin/forger" && execWithArg("clone-parent")(e) })
	root := a.forged("clone-parent", "/bin/sh")
	if root.PPID == forger.PID {
		t.Errorf("clone(CLONE_PARENT) child's parent is the forger %d, want the forger's parent (outside the container)", forger.PID)
	}
	// Control: the same clone in a genuine session inherits the session.
	own := testutil.RandomUUID()
	a.genuine(own, "/bin/forger", "clone-parent", keyName+"="+own, "/bin/sh", "-c", "/bin/echo clone-parent-ok; true")
	ok := a.h.waitFor("genuine clone child", func(e Event) bool { return a.in(e) && execWithArg("clone-parent-ok")(e) && e.Filename == "/bin/sh" })
	if ok.AuditID != own || ok.Source != vocab.SourceInherited {
		t.Errorf("positive control: clone child auditID %q source %q, want %s inherited", ok.AuditID, ok.Source, own)
	}
	noFlags(t, ok, vocab.FlagRootUnverified, vocab.FlagEnvMismatch)
}

func TestKernelAdversaryThreadExec(t *testing.T) {
	a := newAdversary(t)
	own := testutil.RandomUUID()
	other := testutil.RandomUUID()
	for _, tc := range []struct {
		name, op string
		want     []string
	}{
		{"same key", keyName + "=" + own, nil},
		{"key removed", "-" + keyName, []string{vocab.FlagEnvRemoved}},
		{"another key", keyName + "=" + other, []string{vocab.FlagEnvMismatch}},
	} {
		t.Run("genuine session, "+tc.name, func(t *testing.T) {
			tok := "thr-" + strings.ReplaceAll(tc.name, " ", "-")
			a.genuine(own, "/bin/forger", "thread-exec", tc.op, "/bin/echo", tok)
			ev := a.h.waitFor(tok, func(e Event) bool { return a.in(e) && e.Filename == "/bin/echo" && execWithArg(tok)(e) })
			if ev.AuditID != own || ev.Source != vocab.SourceInherited {
				t.Errorf("thread exec: auditID %q source %q, want %s inherited", ev.AuditID, ev.Source, own)
			}
			wantFlags(t, ev, tc.want...)
			noFlags(t, ev, vocab.FlagRootUnverified)
		})
	}
	t.Run("no session, borrowed key", func(t *testing.T) {
		a.t = t
		a.exec("/bin/forger", "thread-exec", keyName+"="+a.victim, "/bin/echo", "thr-forged")
		ev := a.h.waitFor("forged thread exec", func(e Event) bool { return a.in(e) && e.Filename == "/bin/echo" && execWithArg("thr-forged")(e) })
		if ev.AuditID != a.victim || ev.Source != vocab.SourceEnv {
			t.Errorf("auditID %q source %q, want the borrowed ID as a root", ev.AuditID, ev.Source)
		}
		wantFlags(t, ev, vocab.FlagRootUnverified)
		// The thread's copy of the image place is what judged it: not unknown.
		if ev.ExecOrigin != OriginInside {
			t.Errorf("exec origin %q, want %q (the thread inherited its creator's place)", ev.ExecOrigin, OriginInside)
		}
	})
}

func TestKernelAdversaryManySessions(t *testing.T) {
	a := newAdversary(t)
	ids := make([]string, 40)
	done := make(chan struct{})
	for i := range ids {
		ids[i] = testutil.RandomUUID()
		go func() {
			defer func() { done <- struct{}{} }()
			script := "/bin/sleep 1; /bin/echo many-" + ids[i][:8] + "; /bin/true many-" + ids[i][:8]
			if out, err := a.c.Exec(context.Background(), []string{"sh", "-c", script}, keyEnv(ids[i])); err != nil {
				t.Errorf("session %d: %v: %s", i, err, out)
			}
		}()
	}
	for range ids {
		<-done
	}
	for _, id := range ids {
		tok := "many-" + id[:8]
		root := a.h.waitFor("root "+tok, func(e Event) bool { return a.in(e) && execWithArg(tok)(e) && e.Source == vocab.SourceEnv })
		a.h.waitFor("true "+tok, func(e Event) bool { return a.in(e) && execWithArg(tok)(e) && e.Filename == "/bin/true" })
		noFlags(t, root, vocab.FlagRootUnverified)
		for _, ev := range a.h.all(func(e Event) bool { return a.in(e) && (execWithArg(tok)(e) || e.SessionRootID == root.ProcessID) }) {
			if ev.AuditID != id || ev.SessionRootID != root.ProcessID {
				t.Errorf("session %s: %s %v carries %q under root %q", id, ev.Filename, ev.Argv, ev.AuditID, ev.SessionRootID)
			}
		}
	}
}

func TestKernelAdversaryNested(t *testing.T) {
	a := newAdversary(t)
	id := testutil.RandomUUID()
	// Each level is a real exec of /bin/sh as a child (the "; true" stops
	// busybox from exec'ing the last command in place).
	nest := `if [ "$1" -gt 0 ]; then /bin/sh -c "$NEST" sh $(($1-1)); true; else /bin/echo nested-bottom; fi`
	if out, err := a.c.Exec(context.Background(), []string{"sh", "-c", nest, "sh", "20"}, "NEST="+nest, keyEnv(id)); err != nil {
		t.Fatalf("nested exec: %v: %s", err, out)
	}
	bottom := a.h.waitFor("the bottom echo", func(e Event) bool { return a.in(e) && execWithArg("nested-bottom")(e) && e.Filename == "/bin/echo" })
	root := a.h.waitFor("the root", func(e Event) bool { return a.in(e) && e.ProcessID == bottom.SessionRootID })
	if bottom.AuditID != id || bottom.Depth < 20 || root.AuditID != id || root.Source != vocab.SourceEnv {
		t.Errorf("20 shells deep: auditID %q depth %d; root auditID %q source %q", bottom.AuditID, bottom.Depth, root.AuditID, root.Source)
	}
	noFlags(t, bottom, vocab.FlagRootUnverified, vocab.FlagEnvMismatch, vocab.FlagEnvRemoved)
}

// TestKernelAdversaryNestedNamespace: the intruder makes a pid namespace of
// its own (under a new user namespace, all an unprivileged process may) so
// that its image's pid namespace differs from the root's, and hands the
// child to its outside parent with CLONE_PARENT. The owner of the pid
// namespace gives it away.
func TestKernelAdversaryNestedNamespace(t *testing.T) {
	a := newAdversary(t)
	a.exec("/bin/forger", "userns-pidns", keyName+"="+a.victim, "/bin/sh", "-c", "/bin/echo nested-ns; true")
	root := a.forged("nested-ns", "/bin/sh")
	if root.ExecOrigin != OriginNestedUserns {
		t.Errorf("exec origin %q, want %q", root.ExecOrigin, OriginNestedUserns)
	}
	if root.PIDNamespace == a.h.waitFor("the forger", func(e Event) bool { return a.in(e) && e.Filename == "/bin/forger" }).PIDNamespace {
		t.Errorf("positive control: the forged root runs in the container's pid namespace, not a nested one")
	}
}

// TestKernelSPOPrefix: the Security Profiles Operator sets its UID with an
// `env SPO_EXEC_REQUEST_UID=… cmd` prefix, so the runtime's first program
// sets it: root_indirect, which keeps SPO attribution. The same variable set
// one fork later, by the container's own code, is not indirect.
func TestKernelSPOPrefix(t *testing.T) {
	a := newAdversary(t)
	const spo = "SPO_EXEC_REQUEST_UID"
	a.exec("/bin/env", spo+"=spo-uid-1", "/bin/sh", "-c", "/bin/echo spo-prefix; true")
	root := a.h.waitFor("SPO root", func(e Event) bool { return a.in(e) && execWithArg("spo-prefix")(e) && e.Filename == "/bin/sh" })
	kv := root.Keys[spo]
	if kv.Value != "spo-uid-1" || kv.Source != vocab.SourceEnv || root.ExecOrigin != OriginRuntimeChild {
		t.Errorf("SPO root: %+v origin %q, want spo-uid-1 from env, exec'd by the runtime's first program", kv, root.ExecOrigin)
	}
	for _, f := range []string{vocab.FlagRootUnverified, vocab.FlagRootIndirect} {
		if !slices.Contains(kv.Flags, f) {
			t.Errorf("SPO root flags %v lack %s", kv.Flags, f)
		}
	}
	// Control: set from a forked child of the first program, it is inside.
	a.exec("sh", "-c", "/bin/sh -c '"+spo+"=spo-uid-2 /bin/sh -c \"/bin/echo spo-child; true\"; true'; true")
	child := a.h.waitFor("SPO set by a child", func(e Event) bool {
		return a.in(e) && execWithArg("spo-child")(e) && e.Filename == "/bin/sh" && e.Keys[spo].Source == vocab.SourceEnv
	})
	if kv := child.Keys[spo]; slices.Contains(kv.Flags, vocab.FlagRootIndirect) || !slices.Contains(kv.Flags, vocab.FlagRootUnverified) || child.ExecOrigin != OriginInside {
		t.Errorf("SPO set by the container's code: %+v origin %q, want root_unverified without root_indirect", kv, child.ExecOrigin)
	}
}
