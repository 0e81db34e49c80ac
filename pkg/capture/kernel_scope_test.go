package capture

import (
	"context"
	"testing"

	"github.com/execid/correlator/internal/testutil"
)

// TestKernelScope checks --capture-scope in the real kernel: by default a
// host exec with no session and no key is counted and never sent (nor its
// exit), while a host exec carrying the key (lineage) and an exec in a
// runc container under /kubepods are sent; with ScopeAll the host exec is
// sent too (the positive control). Events of one CPU's ring arrive in
// order, so a later sent exec tells that an earlier skipped one would have
// arrived by now.
func TestKernelScope(t *testing.T) {
	c := testutil.NewContainer(t, testutil.ContainerConfig{})
	ctx := context.Background()

	t.Run("pods", func(t *testing.T) {
		h := newHarness(t, nil)
		before, err := h.p.Stats()
		if err != nil {
			t.Fatal(err)
		}
		host := run(t, []string{"/bin/sh", "-c", "exit 0", "host-nokey"}, baseEnv())
		id := testutil.RandomUUID()
		keyed := run(t, []string{"/bin/sh", "-c", "exit 0", "host-keyed"}, append(baseEnv(), keyEnv(id)))
		ev := h.waitFor("the keyed host exec", execOf(keyed))
		if ev.AuditID != id {
			t.Errorf("keyed host exec: auditID %q, want %s", ev.AuditID, id)
		}
		h.waitFor("the keyed host exec's exit", func(e Event) bool { return e.Kind == KindExit && e.PID == uint32(keyed) })
		if out, err := c.Exec(ctx, []string{"/bin/sh", "-c", "exit 0", "pod-nokey"}); err != nil {
			t.Fatalf("runc exec: %v: %s", err, out)
		}
		pod := h.waitFor("the pod exec", func(e Event) bool { return execWithArg("pod-nokey")(e) && e.ContainerID == c.ID })
		if pod.AuditID != "" {
			t.Errorf("pod exec without a key: auditID %q", pod.AuditID)
		}
		if got := h.all(func(e Event) bool { return e.PID == uint32(host) }); len(got) != 0 {
			t.Errorf("host exec with no key sent %d events (first %s %v), want none", len(got), got[0].Kind, got[0].Argv)
		}
		if got := h.all(execWithArg("host-nokey")); len(got) != 0 {
			t.Errorf("host exec's argv reached userspace: %v", got[0].Argv)
		}
		after, err := h.p.Stats()
		if err != nil {
			t.Fatal(err)
		}
		if after.ExecsSkipped <= before.ExecsSkipped {
			t.Errorf("execs skipped %d -> %d, want it counted", before.ExecsSkipped, after.ExecsSkipped)
		}
	})

	t.Run("all", func(t *testing.T) {
		h := newHarness(t, func(c *Config) { c.Scope = ScopeAll })
		host := run(t, []string{"/bin/sh", "-c", "exit 0", "host-all"}, baseEnv())
		ev := h.waitFor("the host exec", execOf(host))
		if !execWithArg("host-all")(ev) {
			t.Errorf("host exec argv %v", ev.Argv)
		}
		h.waitFor("the host exec's exit", func(e Event) bool { return e.Kind == KindExit && e.PID == uint32(host) })
		s, err := h.p.Stats()
		if err != nil {
			t.Fatal(err)
		}
		if s.ExecsSkipped != 0 {
			t.Errorf("execs skipped %d with scope all, want 0", s.ExecsSkipped)
		}
	})
}
