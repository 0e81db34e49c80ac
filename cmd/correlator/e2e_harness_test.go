package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/execid/correlator/internal/testutil"
	"github.com/execid/correlator/pkg/api"
	"github.com/execid/correlator/pkg/join"
)

// The e2e pod: what --pod-map says about the test container.
const (
	e2eNamespace = "shop"
	e2ePod       = "web-0"
	e2eContainer = "app"
	auditKey     = "KUBERNETES_EXEC_AUDIT_ID"
)

// e2eEnv is what outlives one agent process: the container, the store,
// the audit log, the pinned maps and the listen address.
type e2eEnv struct {
	t        *testing.T
	bin      string
	ctr      *testutil.Container
	dir      string
	podMap   string
	auditLog string
	pin      string
	addr     string
	logMu    *sync.Mutex
}

// e2eAgent is a real `correlator run` (real BPF, real SQLite, real HTTP) and
// a real runc container it watches.
type e2eAgent struct {
	t        *testing.T
	env      *e2eEnv
	ctr      *testutil.Container
	base     string
	client   *api.Client
	auditLog string
	logMu    *sync.Mutex
	stderr   *testutil.SyncBuffer
	cmd      *exec.Cmd
	done     chan error
	stopped  bool
}

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// startE2E starts the container and the agent, and waits for /readyz.
func startE2E(t *testing.T, extra ...string) *e2eAgent {
	t.Helper()
	return newE2EEnv(t, testutil.ContainerConfig{}).start(extra...)
}

// newE2EEnv starts the container and lays out the agent's files.
func newE2EEnv(t *testing.T, cfg testutil.ContainerConfig) *e2eEnv {
	t.Helper()
	testutil.RequireRoot(t)
	testutil.EnsureBPFFS(t)
	e := &e2eEnv{t: t, bin: buildBinary(t), ctr: testutil.NewContainer(t, cfg), dir: t.TempDir(), logMu: &sync.Mutex{}}
	e.podMap = filepath.Join(e.dir, "pods.json")
	pm, _ := json.Marshal([]map[string]string{{"containerID": e.ctr.ID, "podUID": e.ctr.PodUID,
		"namespace": e2eNamespace, "pod": e2ePod, "container": e2eContainer}})
	if err := os.WriteFile(e.podMap, pm, 0o600); err != nil {
		t.Fatal(err)
	}
	e.auditLog = filepath.Join(e.dir, "audit.log")
	if err := os.WriteFile(e.auditLog, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	e.pin = filepath.Join(testutil.BPFFSPath, fmt.Sprintf("correlator-e2e-%d-%d", os.Getpid(), time.Now().UnixNano()))
	t.Cleanup(func() { os.RemoveAll(e.pin) })
	e.addr = freePort(t)
	return e
}

// start runs an agent on e's files and waits for /readyz.
func (e *e2eEnv) start(extra ...string) *e2eAgent {
	t := e.t
	t.Helper()
	args := append([]string{"run", "--listen", e.addr, "--insecure-no-auth",
		"--store", "sqlite:" + filepath.Join(e.dir, "c.db"), "--pod-map", e.podMap,
		"--audit-log", e.auditLog, "--audit-checkpoint-dir", filepath.Join(e.dir, "ckpt"),
		"--pin-path", e.pin}, extra...)
	cmd := exec.Command(e.bin, args...)
	a := &e2eAgent{t: t, env: e, ctr: e.ctr, base: "http://" + e.addr, auditLog: e.auditLog, stderr: &testutil.SyncBuffer{},
		logMu: e.logMu, cmd: cmd, done: make(chan error, 1)}
	cmd.Stderr = a.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { a.done <- cmd.Wait() }()
	t.Cleanup(func() {
		if a.stopped {
			return
		}
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-a.done:
			if err != nil {
				t.Errorf("agent exited with %v\n%s", err, a.stderr)
			}
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			t.Errorf("agent did not stop on SIGTERM\n%s", a.stderr)
		}
	})
	a.client = &api.Client{BaseURL: a.base, HTTP: &http.Client{Timeout: testutil.EventuallyBound}}
	deadline := time.Now().Add(testutil.EventuallyBound)
	for {
		resp, err := http.Get(a.base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return a
			}
		}
		select {
		case err := <-a.done:
			t.Fatalf("agent exited before ready: %v\n%s", err, a.stderr)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("agent not ready after %s\n%s", testutil.EventuallyBound, a.stderr)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// kill ends the agent with SIGKILL: no shutdown, no flush, as a crash or
// an OOM kill would.
func (a *e2eAgent) kill() {
	a.t.Helper()
	a.stopped = true
	if err := a.cmd.Process.Kill(); err != nil {
		a.t.Fatalf("killing the agent: %v", err)
	}
	<-a.done
}

// request returns an exec request on the e2e pod, received now.
func (a *e2eAgent) request(user string, command ...string) testutil.ExecRequest {
	return testutil.ExecRequest{AuditID: testutil.RandomUUID(), User: user, Groups: []string{"dev"},
		Namespace: e2eNamespace, Pod: e2ePod, Container: e2eContainer, Command: command,
		Received: time.Now(), Duration: 2 * time.Second}
}

// exec runs args in the container as the runtime lands a `kubectl exec`
// for req: with KUBERNETES_EXEC_AUDIT_ID set to its audit ID.
func (a *e2eAgent) exec(req testutil.ExecRequest, args ...string) string {
	a.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var env []string
	if req.AuditID != "" {
		env = append(env, auditKey+"="+req.AuditID)
	}
	out, err := a.ctr.Exec(ctx, args, env...)
	if err != nil {
		a.t.Fatalf("exec %q: %v\n%s", args, err, out)
	}
	return string(out)
}

// writeLog appends req's audit events to the tailed audit log file.
func (a *e2eAgent) writeLog(req testutil.ExecRequest) {
	a.t.Helper()
	a.logMu.Lock()
	defer a.logMu.Unlock()
	f, err := os.OpenFile(a.auditLog, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		a.t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(req.LogLines()); err != nil {
		a.t.Fatal(err)
	}
}

// postWebhook delivers req's audit events as kube-apiserver's webhook
// backend does: one EventList POST.
func (a *e2eAgent) postWebhook(req testutil.ExecRequest) {
	a.t.Helper()
	resp, err := http.Post(a.base+api.WebhookPath, "application/json", bytes.NewReader(req.EventList()))
	if err != nil {
		a.t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		a.t.Fatalf("webhook POST: %s", resp.Status)
	}
}

// processes returns the stored processes in the e2e pod whose argv
// contains marker (the host-side `runc exec` carries it too).
func (a *e2eAgent) processes(marker string) []join.Process {
	a.t.Helper()
	page, err := a.client.Processes(context.Background(), url.Values{"command": {marker}, "pod": {e2ePod}, "limit": {"500"}})
	if err != nil {
		a.t.Fatalf("listing processes: %v", err)
	}
	return page.Items
}

// waitFor polls the API until check passes on the processes matching
// marker. timeout is how long the behaviour itself may take (a TTL to run
// out); testutil.EventuallyBound is added so a busy machine makes the wait
// longer, never red. It measures nothing.
func (a *e2eAgent) waitFor(marker string, timeout time.Duration, check func([]join.Process) error) []join.Process {
	a.t.Helper()
	timeout += testutil.EventuallyBound
	deadline := time.Now().Add(timeout)
	for {
		ps := a.processes(marker)
		err := check(ps)
		if err == nil {
			return ps
		}
		if time.Now().After(deadline) {
			a.t.Fatalf("after %s: %v\nprocesses:\n%s\nagent log tail:\n%s", timeout, err, dumpProcs(ps), tail(a.stderr.String(), 3000))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func dumpProcs(ps []join.Process) string {
	var b strings.Builder
	for _, p := range ps {
		fmt.Fprintf(&b, "  %s parent=%s argv=%q audit=%s claimed=%s attr=%s flags=%v\n",
			p.ProcessID, p.ParentProcessID, p.Argv, p.AuditID, p.ClaimedAuditID, p.Attribution, p.Flags)
	}
	return b.String()
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// byArgv finds the process whose argv starts with prefix.
func byArgv(ps []join.Process, prefix ...string) *join.Process {
	for i := range ps {
		if len(ps[i].Argv) >= len(prefix) && slices.Equal(ps[i].Argv[:len(prefix)], prefix) {
			return &ps[i]
		}
	}
	return nil
}
