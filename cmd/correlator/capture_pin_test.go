package main

import (
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/execid/correlator/internal/testutil"
	"github.com/execid/correlator/pkg/capture"
)

// TestCapturePinAfterKill: `capture --pin` killed with SIGKILL leaves its
// probes pinned and a fresh heartbeat; another started at once on the same
// pin path finds the heartbeat's process gone (the same PID namespace) and
// takes the pins over, without waiting for the heartbeat to age. The
// control: while the first runs, the second is refused, naming it.
func TestCapturePinAfterKill(t *testing.T) {
	testutil.RequireRoot(t)
	bin := buildBinary(t)
	testutil.PrivateBPFFS(t)
	first := startCommand(t, bin, "capturing", "capture", "--with-id-only", "--pin")
	pid := first.cmd.Process.Pid
	testutil.Eventually(t, "the first capture's heartbeat, its process seen running", func() bool {
		r, ok := capture.LiveReader(capture.DefaultPinPath)
		return ok && r.PID == uint32(pid) && r.Seen
	})

	out, err := exec.Command(bin, "capture", "--pin").CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || !strings.Contains(string(out), "process "+strconv.Itoa(pid)+" ") ||
		!strings.Contains(string(out), "is reading") {
		t.Fatalf("capture --pin beside a running one: %v\n%s\nwant a refusal naming process %d", err, out, pid)
	}

	if err := first.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-first.exited
	if _, ok := capture.LiveReader(capture.DefaultPinPath); ok {
		t.Fatal("a live reader after the capture was killed")
	}
	second := startCommand(t, bin, "capturing", "capture", "--with-id-only", "--pin")
	if !strings.Contains(second.stderr.String(), "adopting this build's pinned probes") {
		t.Errorf("the second capture did not adopt the killed one's probes:\n%s", second.stderr)
	}
	second.stop(t, os.Interrupt)
	if out, err := exec.Command(bin, "uninstall").CombinedOutput(); err != nil {
		t.Fatalf("uninstall: %v\n%s", err, out)
	}
}
