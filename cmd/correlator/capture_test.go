package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/execid/correlator/internal/testutil"
	"github.com/execid/correlator/pkg/capture"
	"github.com/execid/correlator/pkg/vocab"
)

// agentBinaryEnv names a prebuilt correlator binary that buildBinary
// returns instead of compiling one: the kernel matrix builds it on the host,
// since building Go in a TCG guest takes minutes.
const agentBinaryEnv = "CORRELATOR_TEST_AGENT_BIN"

// buildBinary compiles correlator once per test, or returns the binary
// agentBinaryEnv names.
func buildBinary(t *testing.T) string {
	t.Helper()
	if bin := os.Getenv(agentBinaryEnv); bin != "" {
		if _, err := os.Stat(bin); err != nil {
			t.Fatalf("finding the prebuilt correlator (%s): %v", agentBinaryEnv, err)
		}
		t.Logf("correlator: the prebuilt %s (%s)", bin, agentBinaryEnv)
		return bin
	}
	bin := filepath.Join(t.TempDir(), "correlator")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("building correlator: %v\n%s", err, out)
	}
	return bin
}

var ourPrograms = map[string]bool{"handle_exec": true, "handle_fork": true, "handle_exit": true}

// ourLinks returns the IDs of attached links whose program is one of ours.
// Other processes (another package's tests) may hold links too, so the
// test compares ID sets, not counts.
func ourLinks(t *testing.T) map[link.ID]bool {
	t.Helper()
	it := new(link.Iterator)
	ids := map[link.ID]bool{}
	for it.Next() {
		info, err := it.Link.Info()
		if err == nil {
			if prog, err := ebpf.NewProgramFromID(info.Program); err == nil {
				if pi, err := prog.Info(); err == nil && ourPrograms[pi.Name] {
					ids[info.ID] = true
				}
				prog.Close()
			}
		}
		it.Link.Close()
	}
	if err := it.Err(); err != nil {
		t.Fatalf("iterating links: %v", err)
	}
	return ids
}

// heldLinks returns the IDs of the BPF links process pid holds open, from
// /proc/<pid>/fdinfo.
func heldLinks(t *testing.T, pid int) []link.ID {
	t.Helper()
	dir := fmt.Sprintf("/proc/%d/fdinfo", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("reading %s: %v", dir, err)
	}
	var ids []link.ID
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			continue // closed meanwhile
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "link_id:"); ok {
				if n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 32); err == nil {
					ids = append(ids, link.ID(n))
				}
			}
		}
	}
	return ids
}

// TestCaptureCommand runs the real binary: it prints a JSON line for a
// session's exec and detaches everything on SIGINT.
func TestCaptureCommand(t *testing.T) {
	testutil.RequireRoot(t)
	bin := buildBinary(t)
	cmd := exec.Command(bin, "capture", "--with-id-only")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr testutil.SyncBuffer // polled while the binary writes it
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	lines := make(chan capture.Event, 1024)
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var ev capture.Event
			if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
				t.Errorf("capture printed a non-JSON line %q: %v", sc.Text(), err)
				continue
			}
			lines <- ev
		}
		close(lines)
	}()
	testutil.EventuallyNil(t, func() error {
		if !strings.Contains(stderr.String(), "capturing") {
			return fmt.Errorf("capture did not start: %s", stderr.String())
		}
		return nil
	})
	// The links the binary holds, by its own file descriptors: other
	// packages' tests may attach the same programs meanwhile.
	added := map[link.ID]bool{}
	ours := ourLinks(t)
	for _, id := range heldLinks(t, cmd.Process.Pid) {
		if ours[id] {
			added[id] = true
		}
	}
	if len(added) != 3 {
		t.Errorf("capture attached %d links, want 3 (exec, fork, exit)", len(added))
	}
	id := testutil.RandomUUID()
	run := exec.Command("/bin/sh", "-c", "/bin/true cli-test; true")
	run.Env = []string{"KUBERNETES_EXEC_AUDIT_ID=" + id, "PATH=/bin"}
	if out, err := run.CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	var seen bool
	timeout := time.After(testutil.EventuallyBound) // only stops a hang
	for !seen {
		select {
		case ev, ok := <-lines:
			if !ok {
				t.Fatalf("capture exited early: %s", stderr.String())
			}
			seen = ev.Kind == capture.KindExec && ev.AuditID == id && len(ev.Argv) == 2 && ev.Argv[1] == "cli-test" &&
				ev.Source == vocab.SourceInherited && ev.ProcessID != "" && ev.ParentProcessID != ""
		case <-timeout:
			t.Fatal("no JSON line for the session's exec")
		}
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("capture exited with %v after SIGINT: %s", err, stderr.String())
	}
	after := ourLinks(t)
	for id := range added {
		if after[id] {
			t.Errorf("link %d still attached after SIGINT", id)
		}
	}
}

// TestCaptureNeedsRoot checks the message a non-root user gets.
func TestCaptureNeedsRoot(t *testing.T) {
	testutil.RequireRoot(t) // to drop to nobody
	// t.TempDir's parents are private to root: build where nobody can exec.
	dir, err := os.MkdirTemp("", "correlator-nobody-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "correlator")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("building correlator: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "capture")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("capture as nobody succeeded: %s", out)
	}
	if !strings.Contains(string(out), "capture needs root") {
		t.Errorf("message %q does not say root is needed", out)
	}
}
