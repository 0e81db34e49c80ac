package testutil

import (
	"errors"
	"os/exec"
	"strings"
	"testing"
)

// TestForger runs every forger mode inside a runc container, as the
// adversarial suite will: an exec session borrowing another one's audit ID.
func TestForger(t *testing.T) {
	t.Parallel()
	c := NewContainer(t, ContainerConfig{Files: map[string]string{"/bin/forger": BuildForger(t)}})
	own, borrowed := auditKey+"="+RandomUUID(), auditKey+"="+RandomUUID()
	// environ lists the exec'd shell's own environ, in execve order.
	const environ = `cat /proc/$$/environ | tr "\0" "\n"`

	t.Run("reexec", func(t *testing.T) {
		out := forgerExec(t, c, 0, own, "reexec", borrowed, "/bin/sh", "-c", environ)
		if env := keyLines(out); len(env) != 1 || env[0] != borrowed {
			t.Fatalf("reexec KEY=VAL: want only %q, got %q", borrowed, env)
		}
		if env := envLines([]byte(out)); env[len(env)-1] != borrowed {
			t.Fatalf("reexec KEY=VAL: key not last: %q", env)
		}
		out = forgerExec(t, c, 0, own, "reexec", "+"+borrowed, "/bin/sh", "-c", environ)
		if env := keyLines(out); strings.Join(env, ",") != own+","+borrowed {
			t.Fatalf("reexec +KEY=VAL: want %q then %q, got %q", own, borrowed, env)
		}
	})

	t.Run("thread-exec", func(t *testing.T) {
		// The forger runs in the background so the shell knows its PID; the
		// program exec'd from its second thread must keep that PID.
		script := `/bin/forger thread-exec ` + borrowed + ` /bin/sh -c 'echo exec $$; ` + environ + `' &
echo forger $!; wait $!`
		out := forgerExec(t, c, 0, own, "/bin/sh", "-c", script)
		forger, execPID := field(out, "forger"), field(out, "exec")
		if forger == "" || forger != execPID {
			t.Fatalf("thread-exec: forger pid %q, exec'd pid %q, want equal; output:\n%s", forger, execPID, out)
		}
		if env := keyLines(out); len(env) != 1 || env[0] != borrowed {
			t.Fatalf("thread-exec KEY=VAL: want only %q, got %q", borrowed, env)
		}
		key, _, _ := strings.Cut(own, "=")
		out = forgerExec(t, c, 0, own, "thread-exec", "-"+key, "/bin/env")
		if env := keyLines(out); len(env) != 0 {
			t.Fatalf("thread-exec -KEY: key still set: %q", env)
		}
	})

	t.Run("clone-parent", func(t *testing.T) {
		// The child writes to a fifo that the shell reads last, so the shell,
		// the child's parent, is still alive when the child reads its ppid,
		// and runc exec returns only after the child's output.
		script := `mkfifo /tmp/cp
/bin/forger clone-parent ` + borrowed + ` /bin/sh -c '{ echo child $$ $PPID; ` + environ + `; } >/tmp/cp' &
f=$!; wait $f; echo forger $f $?; echo sh $$; cat /tmp/cp`
		out := forgerExec(t, c, 0, own, "/bin/sh", "-c", script)
		forger, sh, child := fields(out, "forger"), field(out, "sh"), fields(out, "child")
		if len(forger) != 2 || forger[1] != "0" || len(child) != 2 {
			t.Fatalf("clone-parent: forger %q, child %q; output:\n%s", forger, child, out)
		}
		if child[0] == forger[0] || child[1] != sh {
			t.Fatalf("clone-parent: child pid %s ppid %s, want ppid = shell %s, not forger %s; output:\n%s",
				child[0], child[1], sh, forger[0], out)
		}
		if env := keyLines(out); len(env) != 1 || env[0] != borrowed {
			t.Fatalf("clone-parent KEY=VAL: want only %q, got %q", borrowed, env)
		}
		out = forgerExec(t, c, ForgerExitExec, own, "clone-parent", borrowed, "/nonexistent")
		if !strings.Contains(out, "executing /nonexistent in clone-parent child") {
			t.Fatalf("clone-parent of a missing program: %q", out)
		}
	})

	t.Run("steal", func(t *testing.T) {
		// The victim is another exec session's process, left running. It
		// must not hold the session's stdout: runc exec waits for that.
		out := forgerExec(t, c, 0, borrowed, "/bin/sh", "-c", "/bin/sleep 1000 >/dev/null 2>&1 & echo victim $!")
		victim := field(out, "victim")
		if victim == "" {
			t.Fatalf("starting victim: %q", out)
		}
		// $! is the forked shell: wait until it has exec'd sleep.
		Eventually(t, "victim exec'd /bin/sleep", func() bool {
			out, err := c.Exec(execCtx(t), []string{"/bin/cat", "/proc/" + victim + "/cmdline"})
			return err == nil && strings.HasPrefix(string(out), "/bin/sleep\x00")
		})
		key, _, _ := strings.Cut(own, "=")
		out = forgerExec(t, c, 0, own, "steal", victim, key, "/bin/sh", "-c", environ)
		if env := keyLines(out); len(env) != 1 || env[0] != borrowed {
			t.Fatalf("steal: want only %q, got %q", borrowed, env)
		}
		out = forgerExec(t, c, ForgerExitNoKey, own, "steal", victim, "NO_SUCH_KEY", "/bin/true")
		if !strings.Contains(out, "NO_SUCH_KEY not in /proc/"+victim+"/environ") {
			t.Fatalf("steal of a missing key: %q", out)
		}
		forgerExec(t, c, ForgerExitProc, own, "steal", "999999", key, "/bin/true")
	})

	t.Run("usage", func(t *testing.T) {
		for _, args := range [][]string{{"bogus"}, {"reexec"}, {"reexec", "=x", "/bin/true"}, {"steal", "x", "K", "/bin/true"}} {
			out := forgerExec(t, c, ForgerExitUsage, own, args...)
			if !strings.Contains(out, "usage: forger") {
				t.Errorf("forger %q: no usage text: %q", args, out)
			}
		}
	})
}

// forgerExec runs /bin/forger args (or args itself when args[0] is a path)
// in c with the exec session env kv, and checks its exit status.
func forgerExec(t *testing.T, c *Container, wantExit int, kv string, args ...string) string {
	t.Helper()
	if !strings.HasPrefix(args[0], "/") {
		args = append([]string{"/bin/forger"}, args...)
	}
	out, err := c.Exec(execCtx(t), args, kv)
	exit := 0
	if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
		exit = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("exec %q: %v: %s", args, err, out)
	}
	if exit != wantExit {
		t.Fatalf("exec %q: exit status %d, want %d; output:\n%s", args, exit, wantExit, out)
	}
	return string(out)
}

// keyLines returns the audit key's lines of an env listing, in order.
func keyLines(out string) []string {
	var env []string
	for _, l := range envLines([]byte(out)) {
		if strings.HasPrefix(l, auditKey+"=") {
			env = append(env, l)
		}
	}
	return env
}

// fields returns the fields after the first output line starting with tag.
func fields(out, tag string) []string {
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 0 && f[0] == tag {
			return f[1:]
		}
	}
	return nil
}

// field returns the first field after tag, or "".
func field(out, tag string) string {
	if f := fields(out, tag); len(f) > 0 {
		return f[0]
	}
	return ""
}
