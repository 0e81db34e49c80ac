package capture

import (
	"context"
	"testing"

	"github.com/execid/correlator/internal/testutil"
	"github.com/execid/correlator/pkg/vocab"
)

// windowMain is the container's entrypoint: it waits for an ID, re-execs
// itself with it (the main-process forgery), and after the restart runs a
// command under it.
const windowMain = `mkfifo /tmp/trig /tmp/after-main /tmp/after-inplace /tmp/after-victim; read id < /tmp/trig; ` +
	`exec /bin/forger reexec ` + keyName + `=$id /bin/sh -c '/bin/echo window-main; read x < /tmp/after-main; /bin/echo after-main; exec /bin/sleep 86400'`

// TestKernelRestartWindowForgers is the restart: the agent is gone
// for a window. In it, a process in the pod with no session execs in place
// with alice's live ID, and the container's main process re-execs with it;
// both run a command after the restart. The pinned probes judged both
// while no agent ran: the next agent reads them from the pinned ring, and
// every one of their processes is root_unverified, none a plain member of
// alice's session. alice's session, waiting across the restart, and a
// session the runtime started during the window stay verified.
func TestKernelRestartWindowForgers(t *testing.T) {
	first := newHarness(t, nil)
	c := testutil.NewContainer(t, testutil.ContainerConfig{
		Files: map[string]string{"/bin/forger": testutil.BuildForger(t)},
		Args:  []string{"/bin/sh", "-c", windowMain},
	})
	in := func(e Event) bool { return e.Kind == KindExec && e.ContainerID == c.ID }
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	background := func(args []string, env ...string) {
		done := make(chan struct{})
		go func() { defer close(done); _, _ = c.Exec(ctx, args, env...) }()
		t.Cleanup(func() { cancel(); <-done })
	}
	exec := func(args ...string) {
		t.Helper()
		if out, err := c.Exec(context.Background(), args); err != nil {
			t.Fatalf("runc exec %q: %v: %s", args, err, out)
		}
	}
	alice := testutil.RandomUUID()
	background([]string{"sh", "-c", "read x < /tmp/after-victim; /bin/echo after-victim; /bin/sleep 86400", "victim"}, keyEnv(alice))
	victim := first.waitFor("alice's root", func(e Event) bool {
		return in(e) && e.Source == vocab.SourceEnv && len(e.Argv) > 0 && e.Argv[len(e.Argv)-1] == "victim"
	})
	// The intruder's process: started keyless before the window.
	background([]string{"sh", "-c", "mkfifo /tmp/trig2; read id < /tmp/trig2; export " + keyName + "=$id; " +
		"exec /bin/sh -c '/bin/echo window-inplace; read x < /tmp/after-inplace; /bin/echo after-inplace; /bin/sleep 86400'", "intruder"})
	intruder := first.waitFor("intruder's shell", func(e Event) bool { return in(e) && execWithArg("intruder")(e) })
	first.stop()

	// The window: no agent runs.
	exec("sh", "-c", "while [ ! -p /tmp/trig2 ]; do sleep 0.05; done; echo "+alice+" > /tmp/trig2; echo "+alice+" > /tmp/trig")
	testutil.WaitCmdline(t, int(intruder.PID), "window-inplace")
	testutil.WaitCmdline(t, c.InitPID(), "window-main")
	during := testutil.RandomUUID()
	if out, err := c.Exec(context.Background(), []string{"sh", "-c", "/bin/echo during-" + during[:8] + "; true"}, keyEnv(during)); err != nil {
		t.Fatalf("runc exec during the window: %v: %s", err, out)
	}

	second := startHarness(t, first.cfg)
	if w := second.p.Window(); !w.Found {
		t.Errorf("restart found no unread window: %+v", w)
	}
	boot, err := second.p.Bootstrap()
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range boot {
		if ev.ContainerID == c.ID {
			t.Errorf("bootstrap re-added %d %v: the pinned probes saw it", ev.PID, ev.Argv)
		}
	}
	exec("sh", "-c", "echo go > /tmp/after-main; echo go > /tmp/after-inplace; echo go > /tmp/after-victim")
	for _, tok := range []string{"window-inplace", "window-main", "after-inplace", "after-main"} {
		ev := second.waitFor(tok, func(e Event) bool { return in(e) && execWithArg(tok)(e) && e.Filename == "/bin/echo" })
		if ev.AuditID != alice {
			t.Errorf("%s: carries %q, want alice's %s recorded as borrowed", tok, ev.AuditID, alice)
		}
		wantFlags(t, ev, vocab.FlagRootUnverified)
		if ev.SessionRootID == victim.ProcessID {
			t.Errorf("%s: a member of alice's session %s", tok, victim.ProcessID)
		}
	}
	for _, ctl := range []struct{ tok, id string }{{"after-victim", alice}, {"during-" + during[:8], during}} {
		ev := second.waitFor(ctl.tok, func(e Event) bool { return in(e) && execWithArg(ctl.tok)(e) && e.Filename == "/bin/echo" })
		if ev.AuditID != ctl.id {
			t.Errorf("positive control %s: auditID %q, want %s", ctl.tok, ev.AuditID, ctl.id)
		}
		noFlags(t, ev, vocab.FlagRootUnverified, vocab.FlagProcfsRoot, vocab.FlagEnvMismatch)
	}
}
