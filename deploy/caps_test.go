package deploy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"

	appsv1 "k8s.io/api/apps/v1"

	"github.com/execid/correlator/internal/testutil"
)

func agentDaemonSet(t *testing.T) *appsv1.DaemonSet {
	t.Helper()
	return only[*appsv1.DaemonSet](t, renderObjects(t), "correlator")
}

// captureRun is what `correlator capture` did under one capability set.
type captureRun struct {
	failed   bool   // exited before capturing
	stderr   string // its log
	pre      *captureLine
	liveSeen bool
}

type captureLine struct {
	AuditID  string `json:"auditID"`
	Source   string `json:"source"`
	Filename string `json:"filename"`
}

// nobody runs the test's processes as another user than the agent's.
var nobody = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}

// runCapture starts a process of another user carrying an audit ID, then
// `correlator capture` under caps (it reconciles the process from /proc at
// startup), then a second such process while it captures.
func runCapture(t *testing.T, caps []string, tag string) captureRun {
	t.Helper()
	preID, liveID := "pre-"+tag, "live-"+tag
	pre := exec.Command("/bin/sleep", "86400") // killed below: it must outlive a slow capture start
	pre.Env = []string{"KUBERNETES_EXEC_AUDIT_ID=" + preID}
	pre.SysProcAttr = nobody
	if err := pre.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { pre.Process.Kill(); pre.Wait() }()

	pin := fmt.Sprintf("/sys/fs/bpf/correlator-captest-%d-%s", os.Getpid(), tag)
	defer os.RemoveAll(pin)
	args := append(setprivArgs(t, caps), correlatorBin(t), "capture", "--with-id-only", "--pin", "--pin-path", pin)
	cmd := exec.Command(args[0], args[1:]...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderrR, stderrW := io.Pipe()
	cmd.Stderr = stderrW
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var run captureRun
	var mu sync.Mutex
	var logBuf bytes.Buffer
	capturing := make(chan struct{})
	logDone := make(chan struct{})
	go func() { // the log: "capturing" means the probes are attached
		defer close(logDone)
		sc := bufio.NewScanner(stderrR)
		once := sync.Once{}
		for sc.Scan() {
			mu.Lock()
			logBuf.WriteString(sc.Text() + "\n")
			mu.Unlock()
			if strings.Contains(sc.Text(), `"message":"capturing"`) {
				once.Do(func() { close(capturing) })
			}
		}
	}()
	lines := make(chan captureLine, 64)
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var l captureLine
			if json.Unmarshal(sc.Bytes(), &l) == nil {
				lines <- l
			}
		}
		close(lines)
	}()
	exited := make(chan struct{})
	go func() { cmd.Wait(); stderrW.Close(); close(exited) }()
	defer func() { cmd.Process.Kill(); <-exited }()

	ctx, cancel := context.WithTimeout(t.Context(), testutil.EventuallyBound) // only stops a hang
	defer cancel()
	select {
	case <-capturing:
	case <-exited:
		run.failed = true
	case <-ctx.Done():
		t.Fatalf("caps %v: capture neither started nor failed", caps)
	}
	if !run.failed {
		live := exec.Command("/bin/true")
		live.Env = []string{"KUBERNETES_EXEC_AUDIT_ID=" + liveID}
		live.SysProcAttr = nobody
		if err := live.Run(); err != nil {
			t.Fatal(err)
		}
	wait:
		for !run.liveSeen {
			select {
			case l, ok := <-lines:
				if !ok {
					break wait
				}
				switch l.AuditID {
				case preID:
					run.pre = &l
				case liveID:
					run.liveSeen = true
				}
			case <-ctx.Done():
				break wait
			}
		}
	}
	cmd.Process.Kill()
	<-exited
	<-logDone // the scanner has read all the agent wrote (the pipe closed on exit)
	mu.Lock()
	run.stderr = logBuf.String()
	mu.Unlock()
	return run
}

// TestCapabilitiesEachNeeded shows that the DaemonSet's capability set
// works, and that each capability in it is needed: without it the probes do
// not load, or startup reconciliation loses another user's process.
func TestCapabilitiesEachNeeded(t *testing.T) {
	testutil.EnsureBPFFS(t)
	var caps []string
	for _, c := range agentDaemonSet(t).Spec.Template.Spec.Containers[0].SecurityContext.Capabilities.Add {
		caps = append(caps, string(c))
	}
	full := runCapture(t, caps, "full")
	if full.failed || !full.liveSeen || full.pre == nil || full.pre.Source != "procfs" || full.pre.Filename == "" {
		t.Fatalf("with %v: failed=%v live=%v pre=%+v; want a running capture that sees both processes\n%s",
			caps, full.failed, full.liveSeen, full.pre, full.stderr)
	}
	for _, drop := range caps {
		t.Run("without_"+drop, func(t *testing.T) {
			less := slices.DeleteFunc(slices.Clone(caps), func(c string) bool { return c == drop })
			r := runCapture(t, less, strings.ToLower(drop))
			switch drop {
			case "BPF", "PERFMON":
				if !r.failed || !strings.Contains(r.stderr, "operation not permitted") {
					t.Errorf("capture ran without %s (failed=%v)\n%s", drop, r.failed, r.stderr)
				}
			case "SYS_PTRACE":
				// PTRACE_MODE_READ guards /proc/<pid>/exe (and, on kernels
				// where CAP_PERFMON does not stand in for it, environ).
				if r.failed || !r.liveSeen {
					t.Fatalf("capture failed without %s\n%s", drop, r.stderr)
				}
				if r.pre != nil && r.pre.Filename != "" {
					t.Errorf("without %s the other user's process was fully reconciled: %+v", drop, r.pre)
				}
			case "DAC_READ_SEARCH":
				if r.failed || !r.liveSeen {
					t.Fatalf("capture failed without %s\n%s", drop, r.stderr)
				}
				if r.pre != nil {
					t.Errorf("without %s /proc/<pid>/environ (mode 0400) was still read: %+v", drop, r.pre)
				}
			default:
				t.Errorf("capability %s has no test showing it is needed", drop)
			}
		})
	}
}
