package deploy

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/execid/correlator/internal/testutil"
)

var agentBin struct {
	sync.Once
	path string
	err  error
}

// correlatorBin builds cmd/correlator the way the Dockerfile does.
func correlatorBin(t *testing.T) string {
	t.Helper()
	agentBin.Do(func() {
		dir, err := os.MkdirTemp("", "correlator-deploytest-")
		if err != nil {
			agentBin.err = err
			return
		}
		agentBin.path = filepath.Join(dir, "correlator")
		cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", agentBin.path, "../cmd/correlator")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			agentBin.err = fmt.Errorf("building correlator: %w\n%s", err, out)
		}
	})
	if agentBin.err != nil {
		t.Fatal(agentBin.err)
	}
	return agentBin.path
}

// setprivArgs runs a command as root with exactly caps in its bounding
// set, and so in its permitted and effective sets, under no_new_privs: what
// a container runtime does with the DaemonSet's securityContext.
func setprivArgs(t *testing.T, caps []string) []string {
	t.Helper()
	p, err := exec.LookPath("setpriv")
	if err != nil {
		t.Fatalf("setpriv (util-linux) not found: %v", err)
	}
	set := "-all"
	for _, c := range caps {
		set += ",+" + strings.ToLower(c)
	}
	return []string{p, "--no-new-privs", "--bounding-set=" + set, "--inh-caps=-all", "--"}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

type runningAgent struct {
	base, token string
	cmd         *exec.Cmd
	stderr      *bytes.Buffer
}

// startAgent runs `correlator run` with the chart's rendered config file,
// its paths moved into a temporary directory. With caps non-nil it runs
// under exactly those capabilities, capture on; otherwise --no-capture.
func startAgent(t *testing.T, caps []string) *runningAgent {
	t.Helper()
	tmp := t.TempDir()
	port := freePort(t)
	pin := fmt.Sprintf("/sys/fs/bpf/correlator-deploytest-%d", os.Getpid())
	out := render(t,
		"--set", fmt.Sprintf("agent.config.listen=127.0.0.1:%d", port),
		"--set", "agent.config.store=sqlite:"+filepath.Join(tmp, "correlator.db"),
		"--set", "agent.config.audit-checkpoint-dir="+filepath.Join(tmp, "audit"),
		"--set", "agent.config.proc-root=/proc",
		"--set", "agent.config.pin-path="+pin,
		"--set", "criSocket=")
	cfg, err := AgentConfig(out)
	if err != nil {
		t.Fatal(err)
	}
	cfgPath, tokPath := filepath.Join(tmp, "config.yaml"), filepath.Join(tmp, "token")
	const token = "deploy-test-token"
	for p, b := range map[string][]byte{cfgPath: cfg, tokPath: []byte(token + "\n")} {
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// The token file is the one path the chart fixes (its Secret mount).
	args := []string{correlatorBin(t), "run", "--config", cfgPath, "--token-file", tokPath}
	if caps == nil {
		args = append(args, "--no-capture")
	} else {
		args = append(setprivArgs(t, caps), args...)
		t.Cleanup(func() { os.RemoveAll(pin) })
	}
	a := &runningAgent{base: fmt.Sprintf("http://127.0.0.1:%d", port), token: token, stderr: &bytes.Buffer{}}
	a.cmd = exec.Command(args[0], args[1:]...)
	a.cmd.Stderr = a.stderr
	if err := a.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- a.cmd.Wait() }()
	t.Cleanup(func() {
		a.cmd.Process.Signal(syscall.SIGTERM)
		if err := <-exited; err != nil {
			t.Errorf("agent exit after SIGTERM: %v\n%s", err, a.stderr)
		}
	})
	ctx, cancel := context.WithTimeout(t.Context(), testutil.EventuallyBound) // only stops a hang
	defer cancel()
	for {
		if code, _ := a.get(ctx, "/readyz", false); code == http.StatusOK {
			return a
		}
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("agent exited before ready: %v\n%s", err, a.stderr)
		case <-ctx.Done():
			t.Fatalf("agent not ready: %v\n%s", ctx.Err(), a.stderr)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (a *runningAgent) get(ctx context.Context, path string, auth bool) (int, []byte) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.base+path, nil)
	if err != nil {
		return 0, nil
	}
	if auth {
		req.Header.Set("Authorization", "Bearer "+a.token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	b.ReadFrom(resp.Body)
	return resp.StatusCode, b.Bytes()
}

// TestAgentRunsRenderedConfig: the binary accepts the chart's config file
// (every key a flag, every value valid) and serves the API with auth on.
func TestAgentRunsRenderedConfig(t *testing.T) {
	a := startAgent(t, nil)
	if code, body := a.get(t.Context(), "/api/v1/sessions", true); code != http.StatusOK {
		t.Errorf("sessions with token: %d %s", code, body)
	}
	if code, _ := a.get(t.Context(), "/api/v1/sessions", false); code != http.StatusUnauthorized {
		t.Errorf("sessions without token: %d, want 401", code)
	}
}

// TestAgentUnderChartCapabilities runs the agent with capture on under
// exactly the DaemonSet's capabilities, and sees an exec reach the joiner.
func TestAgentUnderChartCapabilities(t *testing.T) {
	testutil.EnsureBPFFS(t)
	ds := agentDaemonSet(t)
	var caps []string
	for _, c := range ds.Spec.Template.Spec.Containers[0].SecurityContext.Capabilities.Add {
		caps = append(caps, string(c))
	}
	a := startAgent(t, caps)
	cmd := exec.Command("/bin/sh", "-c", "true")
	cmd.Env = []string{"KUBERNETES_EXEC_AUDIT_ID=deploytest-" + fmt.Sprint(os.Getpid())}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	ctx, cancel := context.WithTimeout(t.Context(), testutil.EventuallyBound) // only stops a hang
	defer cancel()
	for {
		_, body := a.get(ctx, "/metrics", false)
		if n := counter(t, body, "correlator_agent_events_total", "kind", "exec"); n > 0 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no exec event reached the agent under caps %v\n%s", caps, a.stderr)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// counter reads one labelled counter from a /metrics page.
func counter(t *testing.T, page []byte, name, label, value string) float64 {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(page))
	if err != nil || fams[name] == nil {
		return 0
	}
	for _, m := range fams[name].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == label && l.GetValue() == value {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}
