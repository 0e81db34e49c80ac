package capture

import (
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/execid/correlator/internal/testutil"
)

// TestKernelExitUnheard checks which exits are sent: a forked child that
// never exec'd, of a host process with no session, is named by no exec
// event and sends no exit; the same child in a session sends one, and so
// does every process that exec'd.
func TestKernelExitUnheard(t *testing.T) {
	h := newHarness(t, allScope) // the plain shell is a host process with no key
	// dash runs the background subshell's builtin in the forked child.
	forked := func(env []string) (shell, child uint32) {
		cmd := exec.Command("/bin/sh", "-c", "( : ) & echo $!; wait")
		cmd.Env = env
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("running the forking shell: %v", err)
		}
		pid, err := strconv.ParseUint(strings.TrimSpace(string(out)), 10, 32)
		if err != nil {
			t.Fatalf("parsing the child's pid %q: %v", out, err)
		}
		return uint32(cmd.Process.Pid), uint32(pid)
	}
	exitOf := func(pid uint32) func(Event) bool {
		return func(e Event) bool { return e.Kind == KindExit && e.PID == pid }
	}

	keyed, keyedChild := forked(append(baseEnv(), keyEnv(testutil.RandomUUID())))
	plain, plainChild := forked(baseEnv())
	h.waitFor("keyed shell's exit", exitOf(keyed))
	h.waitFor("keyed child's exit", exitOf(keyedChild))
	h.waitFor("plain shell's exit", exitOf(plain))
	if got := h.all(exitOf(plainChild)); len(got) != 0 {
		t.Errorf("a forked child no exec named and no session holds sent its exit: %+v", got)
	}
}
