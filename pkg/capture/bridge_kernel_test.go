package capture

import (
	"context"
	"slices"
	"testing"

	"github.com/execid/correlator/internal/testutil"
	"github.com/execid/correlator/pkg/vocab"
)

// The exec bridge rewrites a covered exec to `env CORRELATOR_EXEC_ID=<id>
// <command>`: the root the runtime exec'd carries the ID in its argv, which
// the kernel takes as the runtime's word. The positive control is that
// genuine root; the attacker's tries (the same argv from code inside the
// container, the key only in the environment) must come out unverified.
func TestBridgeArgvRoot(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Keys = []string{vocab.AuditIDKey, vocab.SPOKey, vocab.BridgeKey} })
	c := testutil.NewContainer(t, testutil.ContainerConfig{})
	in := func(e Event) bool { return e.Kind == KindExec && e.ContainerID == c.ID }
	run := func(args []string, env ...string) {
		t.Helper()
		if out, err := c.Exec(context.Background(), args, env...); err != nil {
			t.Fatalf("runc exec %q: %v: %s", args, err, out)
		}
	}
	key := func(e Event) KeyValue { return e.Keys[vocab.BridgeKey] }

	// Genuine: the runtime execs the bridge's env, which execs the command
	// in place; the command's child inherits.
	id := testutil.RandomUUID()
	run([]string{"env", vocab.BridgeKey + "=" + id, "/bin/sh", "-c", "/bin/cat /proc/self/stat >/dev/null; true", "bridge-genuine"})
	root := h.waitFor("bridge root (env)", func(e Event) bool { return in(e) && slices.Contains(e.Argv, vocab.BridgeKey+"="+id) })
	if kv := key(root); kv.Value != id || kv.Source != vocab.SourceEnv || slices.Contains(kv.Flags, vocab.FlagRootUnverified) ||
		!slices.Contains(kv.Flags, vocab.FlagBridgeArgv) || !root.ExecOrigin.Verified() {
		t.Fatalf("positive control: the bridge's root has %+v origin %q, want %s from its argv, verified", kv, root.ExecOrigin, id)
	}
	sh := h.waitFor("bridge root (sh, in place)", func(e Event) bool { return in(e) && e.PID == root.PID && e.Filename == "/bin/sh" })
	if kv := key(sh); kv.Value != id || kv.Source != vocab.SourceInherited || len(kv.Flags) != 0 {
		t.Errorf("the command env exec'd in place has %+v, want %s inherited, unflagged", kv, id)
	}
	cat := h.waitFor("bridge child", func(e Event) bool { return in(e) && e.PPID == root.PID && e.Filename == "/bin/cat" })
	if kv := key(cat); kv.Value != id || kv.Source != vocab.SourceInherited || len(kv.Flags) != 0 || cat.SessionRootID != root.ProcessID {
		t.Errorf("the child has %+v root %s, want %s inherited from %s", kv, cat.SessionRootID, id, root.ProcessID)
	}

	// Code inside the container runs env KEY=<stolen>: whichever image
	// first carries the value was exec'd inside, so it is a claim.
	stolen := testutil.RandomUUID()
	run([]string{"sh", "-c", "/bin/env " + vocab.BridgeKey + "=" + stolen + " /bin/cat /proc/self/stat >/dev/null; true"})
	forged := h.waitFor("forged bridge key", func(e Event) bool { return in(e) && key(e).Value == stolen })
	if kv := key(forged); !slices.Contains(kv.Flags, vocab.FlagRootUnverified) {
		t.Errorf("env KEY= run by code inside the container has %+v origin %q, want an unverified claim", kv, forged.ExecOrigin)
	}

	// The key in the environment alone (an image's ENV, a caller's --env)
	// is no bridge's word, even on a runtime exec.
	envOnly := testutil.RandomUUID()
	run([]string{"/bin/cat", "/proc/self/stat"}, vocab.BridgeKey+"="+envOnly)
	e := h.waitFor("bridge key in env only", func(e Event) bool { return in(e) && key(e).Value == envOnly })
	if kv := key(e); !slices.Contains(kv.Flags, vocab.FlagRootUnverified) || slices.Contains(kv.Flags, vocab.FlagBridgeArgv) {
		t.Errorf("the bridge key in the environment only has %+v, want root_unverified", kv)
	}
	// Control for the last: the audit ID key in the environment of the
	// same runtime exec is verified, so the flag above is the bridge rule.
	kep := testutil.RandomUUID()
	run([]string{"/bin/cat", "/proc/self/stat"}, keyName+"="+kep)
	if e := h.waitFor("audit ID key in env", func(e Event) bool { return in(e) && e.AuditID == kep }); e.HasFlag(vocab.FlagRootUnverified) {
		t.Errorf("control: a runtime exec's audit ID key is flagged %v", e.Flags)
	}
}
