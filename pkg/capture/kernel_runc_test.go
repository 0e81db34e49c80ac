package capture

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/execid/correlator/internal/testutil"
	"github.com/execid/correlator/pkg/vocab"
)

// busybox sh runs applets named without a path in-process (no exec), so
// the scripts name /bin/ls and /bin/echo to make real execs.
//
// TestKernelRuncContainer drives real runc containers with Kubernetes-shaped
// cgroup paths: `runc exec --env` does what a KEP-6035 runtime does.
func TestKernelRuncContainer(t *testing.T) {
	h := newHarness(t, nil)
	c := testutil.NewContainer(t, testutil.ContainerConfig{})
	ctx := context.Background()
	inCtr := func(e Event) bool { return e.Kind == KindExec && e.ContainerID == c.ID }

	t.Run("key last, as containerd appends it", func(t *testing.T) {
		id := testutil.RandomUUID()
		tok := "last-" + id[:8]
		out, err := c.Exec(ctx, []string{"sh", "-c", "/bin/ls / >/dev/null; echo " + tok + "; true"}, keyEnv(id))
		if err != nil {
			t.Fatalf("runc exec: %v: %s", err, out)
		}
		root := h.waitFor("session root in the container", func(e Event) bool { return inCtr(e) && execWithArg(tok)(e) })
		if root.AuditID != id || root.Source != vocab.SourceEnv || root.PodUID != c.PodUID {
			t.Errorf("root: auditID %q source %q pod %q, want %s env %s", root.AuditID, root.Source, root.PodUID, id, c.PodUID)
		}
		noFlags(t, root, vocab.FlagRootUnverified) // runc, outside the container, is the parent
		ls := h.waitFor("ls in the container", func(e Event) bool { return inCtr(e) && e.PPID == root.PID })
		if ls.AuditID != id || ls.Source != vocab.SourceInherited || ls.ContainerID != c.ID {
			t.Errorf("child: auditID %q source %q container %q", ls.AuditID, ls.Source, ls.ContainerID)
		}
		exit := h.waitFor("ls's exit", func(e Event) bool { return e.Kind == KindExit && e.ProcessID == ls.ProcessID })
		if exit.ContainerID != c.ID || exit.PodUID != c.PodUID || exit.AuditID != id {
			t.Errorf("exit: container %q pod %q auditID %q", exit.ContainerID, exit.PodUID, exit.AuditID)
		}
	})

	t.Run("key first, in the KEP's order", func(t *testing.T) {
		id := testutil.RandomUUID()
		tok := "first-" + id[:8]
		env := append([]string{keyEnv(id)}, c.Env...)
		if out, err := c.ExecProcess(ctx, env, []string{"sh", "-c", "echo " + tok + "; true"}); err != nil {
			t.Fatalf("runc exec: %v: %s", err, out)
		}
		ev := h.waitFor("root with the key first", func(e Event) bool { return inCtr(e) && execWithArg(tok)(e) })
		if ev.AuditID != id || !ev.ExecOrigin.Verified() {
			t.Errorf("auditID %q origin %q, want %s exec'd by the runtime", ev.AuditID, ev.ExecOrigin, id)
		}
		noFlags(t, ev, vocab.FlagRootUnverified)
	})

	t.Run("overlapping sessions keep distinct IDs", func(t *testing.T) {
		ids := []string{testutil.RandomUUID(), testutil.RandomUUID(), testutil.RandomUUID()}
		var wg sync.WaitGroup
		for i, id := range ids {
			wg.Add(1)
			go func() {
				defer wg.Done()
				script := "/bin/sleep 0.3; /bin/ls / >/dev/null; /bin/echo overlap-" + id[:8] + "; true"
				if out, err := c.Exec(ctx, []string{"sh", "-c", script}, keyEnv(id)); err != nil {
					t.Errorf("session %d: %v: %s", i, err, out)
				}
			}()
		}
		wg.Wait()
		for _, id := range ids {
			tok := "overlap-" + id[:8]
			root := h.waitFor("overlapping root", func(e Event) bool { return inCtr(e) && execWithArg(tok)(e) && e.Filename == "/bin/sh" })
			echo := h.waitFor("overlapping echo", func(e Event) bool { return inCtr(e) && execWithArg(tok)(e) && e.Filename == "/bin/echo" })
			for _, ev := range h.all(func(e Event) bool { return inCtr(e) && e.SessionRootID == root.ProcessID }) {
				if ev.AuditID != id {
					t.Errorf("session %s: process %v carries %q", id, ev.Argv, ev.AuditID)
				}
			}
			if echo.AuditID != id || echo.SessionRootID != root.ProcessID {
				t.Errorf("echo of session %s: auditID %q root %q", id, echo.AuditID, echo.SessionRootID)
			}
		}
	})

	t.Run("forged root inside the container", func(t *testing.T) {
		forged := testutil.RandomUUID()
		tok := "forge-" + forged[:8]
		script := keyName + "=" + forged + " sh -c 'echo " + tok + "'; true"
		if out, err := c.Exec(ctx, []string{"sh", "-c", script}); err != nil {
			t.Fatalf("runc exec: %v: %s", err, out)
		}
		ev := h.waitFor("forged root", func(e Event) bool {
			return inCtr(e) && execWithArg(tok)(e) && !strings.Contains(strings.Join(e.Argv, " "), keyName)
		})
		if ev.AuditID != forged {
			t.Errorf("forged root auditID %q, want %s recorded as claimed", ev.AuditID, forged)
		}
		wantFlags(t, ev, vocab.FlagRootUnverified)
	})
}
