package main

import (
	"context"
	"fmt"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/execid/correlator/internal/testutil"
	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/vocab"
)

// windowEntrypoint is the container's main process: it waits for an ID,
// re-execs itself with it (the main-process forgery), and after the
// restart runs a command under it.
const windowEntrypoint = `mkfifo /tmp/trig /tmp/after-main /tmp/after-inplace /tmp/after-victim; read id < /tmp/trig; ` +
	`exec /bin/forger reexec ` + auditKey + `=$id /bin/sh -c '/bin/echo window-main; read x < /tmp/after-main; /bin/echo after-main; /bin/sleep 86400; true'`

// TestEndToEndRestartWindow is issue 23's restart, through `correlator run`
// and the REST API: the agent is stopped (SIGTERM, as a rollout or a drain
// stops it; SIGKILL, as an OOM kill does) and, while it is gone, a process
// in the pod with no session of its own execs in place with alice's live
// audit ID, and the container's main process re-execs with it. Both run a
// command after the restart. The pinned probes judged them while no agent
// ran: each is flagged a borrowed ID and never returned by ?user=alice.
// alice's waiting session and a session the runtime started during the
// window stay attributed, unflagged (the positive controls).
func TestEndToEndRestartWindow(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		t.Run(sig.String(), func(t *testing.T) { restartWindow(t, sig) })
	}
}

func restartWindow(t *testing.T, sig syscall.Signal) {
	env := newE2EEnv(t, testutil.ContainerConfig{
		Files: map[string]string{"/bin/forger": testutil.BuildForger(t)},
		Args:  []string{"/bin/sh", "-c", windowEntrypoint},
	})
	first := env.start()
	ctx, cancel := context.WithCancel(context.Background())
	var running []chan struct{}
	t.Cleanup(func() {
		cancel()
		for _, d := range running {
			<-d
		}
	})
	background := func(args []string, env ...string) {
		d := make(chan struct{})
		running = append(running, d)
		go func() { defer close(d); _, _ = first.ctr.Exec(ctx, args, env...) }()
	}
	m := marker()
	alice := first.request("alice", "sh", "-c", "...")
	alice.Duration = 10 * time.Minute // open across the restart
	first.writeLog(alice)
	background([]string{"sh", "-c", "read x < /tmp/after-victim; /bin/echo after-victim-" + m + "; /bin/sleep 86400; true", m + "-victim"},
		auditKey+"="+alice.AuditID)
	first.waitFor(m+"-victim", 0, func(ps []join.Process) error {
		if len(ps) == 0 {
			return fmt.Errorf("alice's root not stored yet")
		}
		return attributed(ps, alice.AuditID, vocab.AttributionAuditID)
	})
	// The intruder: a keyless process in the pod, started before the window.
	background([]string{"sh", "-c", "mkfifo /tmp/trig2; read id < /tmp/trig2; export " + auditKey + "=$id; " +
		"exec /bin/sh -c '/bin/echo window-inplace; read x < /tmp/after-inplace; /bin/echo after-inplace; /bin/sleep 86400; true'",
		m + "-intruder"})
	first.waitFor(m+"-intruder", 0, func(ps []join.Process) error {
		if len(ps) == 0 {
			return fmt.Errorf("the intruder's shell not stored yet")
		}
		return nil
	})
	intruder := first.processes(m + "-intruder")[0].PID

	if sig == syscall.SIGKILL {
		first.kill()
	} else {
		first.stopped = true
		if err := first.cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
		if err := <-first.done; err != nil {
			t.Fatalf("agent exited with %v on SIGTERM\n%s", err, first.stderr)
		}
	}

	// The window: no agent runs.
	runIn(t, first, "sh", "-c", "while [ ! -p /tmp/trig2 ]; do sleep 0.05; done; echo "+alice.AuditID+" > /tmp/trig2; echo "+alice.AuditID+" > /tmp/trig")
	testutil.WaitCmdline(t, int(intruder), "window-inplace")
	testutil.WaitCmdline(t, first.ctr.InitPID(), "window-main")
	during := first.request("dave", "sh", "-c", "...")
	first.exec(during, "sh", "-c", "/bin/echo during-"+m+"; true")

	second := env.start()
	second.writeLog(during)
	runIn(t, second, "sh", "-c", "echo go > /tmp/after-main; echo go > /tmp/after-inplace; echo go > /tmp/after-victim")

	var forged []join.Process
	for _, tok := range []string{"window-inplace", "window-main", "after-inplace", "after-main"} {
		ps := second.waitFor(tok, 0, func(ps []join.Process) error {
			p := echoOf(ps, tok)
			if p == nil {
				return fmt.Errorf("%s not stored yet", tok)
			}
			if p.Attribution.Counted() || p.AuditID != "" || !slices.Contains(p.Flags, vocab.FlagRootUnverified) {
				return fmt.Errorf("%s: %q %q flags %v; want unattributed, root_unverified", tok, p.Attribution, p.AuditID, p.Flags)
			}
			if p.ClaimedAuditID != alice.AuditID {
				return fmt.Errorf("%s claims %q, want alice's %s recorded as borrowed", tok, p.ClaimedAuditID, alice.AuditID)
			}
			return nil
		})
		forged = append(forged, *echoOf(ps, tok))
	}
	var own []join.Process
	for _, ctl := range []struct{ tok, id string }{{"after-victim-" + m, alice.AuditID}, {"during-" + m, during.AuditID}} {
		ps := second.waitFor(ctl.tok, 0, func(ps []join.Process) error {
			p := echoOf(ps, ctl.tok)
			if p == nil {
				return fmt.Errorf("%s not stored yet", ctl.tok)
			}
			if !p.Attribution.Counted() || p.AuditID != ctl.id {
				return fmt.Errorf("positive control %s: %q %q, want attributed to %s", ctl.tok, p.Attribution, p.AuditID, ctl.id)
			}
			for _, f := range []string{vocab.FlagRootUnverified, vocab.FlagProcfsRoot, vocab.FlagEnvMismatch, vocab.FlagAuditIDReused} {
				if slices.Contains(p.Flags, f) {
					return fmt.Errorf("positive control %s flagged %s", ctl.tok, f)
				}
			}
			return nil
		})
		if ctl.id == alice.AuditID {
			own = append(own, *echoOf(ps, ctl.tok))
		}
	}
	checkUserFilter(t, second, "alice", own, forged)
}

// runIn runs args in the agent's container with no ID of its own.
func runIn(t *testing.T, a *e2eAgent, args ...string) {
	t.Helper()
	if out, err := a.ctr.Exec(context.Background(), args); err != nil {
		t.Fatalf("runc exec %q: %v: %s", args, err, out)
	}
}

// echoOf is the /bin/echo process whose argv holds tok.
func echoOf(ps []join.Process, tok string) *join.Process {
	for i := range ps {
		if ps[i].Filename == "/bin/echo" && slices.Contains(ps[i].Argv, tok) {
			return &ps[i]
		}
	}
	return nil
}
