package testutil

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// WaitCmdline waits until pid's command line holds tok: an exec seen from
// /proc, where no agent runs to report it.
func WaitCmdline(t testing.TB, pid int, tok string) {
	t.Helper()
	EventuallyNil(t, func() error {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil || !strings.Contains(string(b), tok) {
			return fmt.Errorf("pid %d runs %q, not yet %s", pid, b, tok)
		}
		return nil
	})
}
