package kubeapi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// The real kubectl-correlator binary, run as a responder would run it.

// built is cmd/correlator, built once per test binary (TestMain removes
// it): the plugin and the bridge are the same binary.
var built struct {
	sync.Once
	dir, path string
	err       error
}

// buildCorrelator builds cmd/correlator once.
func buildCorrelator(t *testing.T) string {
	t.Helper()
	built.Do(func() {
		start := time.Now()
		if built.dir, built.err = os.MkdirTemp("", "kubeapi-correlator-"); built.err != nil {
			return
		}
		built.path = filepath.Join(built.dir, "correlator")
		cmd := exec.Command("go", "build", "-o", built.path, "./cmd/correlator")
		cmd.Dir = filepath.Join("..", "..")
		if out, err := cmd.CombinedOutput(); err != nil {
			built.err = fmt.Errorf("building correlator: %v\n%s", err, out)
			return
		}
		t.Logf("built correlator in %s", time.Since(start).Round(time.Millisecond))
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.path
}

// buildPlugin is cmd/correlator linked as kubectl-correlator (the plugin
// name switches it to the plugin's commands).
func buildPlugin(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "kubectl-correlator")
	if err := os.Symlink(buildCorrelator(t), bin); err != nil {
		t.Fatalf("linking kubectl-correlator: %v", err)
	}
	return bin
}

// kubeconfig writes a kubeconfig for a user with a static token, trusting
// the apiserver's serving CA, with namespace as the context's.
func kubeconfig(t *testing.T, s *apiServer, user, token, namespace string) string {
	t.Helper()
	tls := s.admin.TLSClientConfig
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["kubeapi"] = &clientcmdapi.Cluster{Server: s.admin.Host,
		CertificateAuthorityData: tls.CAData, TLSServerName: tls.ServerName}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["kubeapi"] = &clientcmdapi.Context{Cluster: "kubeapi", AuthInfo: user, Namespace: namespace}
	cfg.CurrentContext = "kubeapi"
	path := filepath.Join(t.TempDir(), user+".kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatalf("writing %s: %v", path, err)
	}
	return path
}

// plugin runs the binary with one kubeconfig.
type plugin struct {
	bin, kubeconfig string
}

// result is one run: its output and exit status.
type result struct {
	// prog names the program in String; empty: kubectl correlator.
	prog           string
	args           []string
	stdout, stderr string
	code           int
}

func (r result) String() string {
	prog := r.prog
	if prog == "" {
		prog = "kubectl correlator"
	}
	return prog + " " + strings.Join(r.args, " ") + ": exit " + strconv.Itoa(r.code) +
		"\n--- stdout\n" + r.stdout + "--- stderr\n" + r.stderr
}

func (p plugin) run(t *testing.T, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, p.bin, append([]string{"--kubeconfig", p.kubeconfig}, args...)...)
	// Nothing from the test's environment: no $KUBECONFIG, no store.
	cmd.Env = []string{"HOME=" + t.TempDir(), "PATH=" + os.Getenv("PATH")}
	r := runCommand(t, cmd, "", args)
	t.Logf("%s", r)
	return r
}

// runCommand runs cmd (prog args...) and returns its output and exit
// code; a command that could not run at all fails the test.
func runCommand(t *testing.T, cmd *exec.Cmd, prog string, args []string) result {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := result{prog: prog, args: args, stdout: stdout.String(), stderr: stderr.String()}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	case err != nil:
		t.Fatalf("running %s %v: %v", cmd.Path, args, err)
	}
	return r
}

// must runs args and fails the test unless it exits 0.
func (p plugin) must(t *testing.T, args ...string) result {
	t.Helper()
	r := p.run(t, args...)
	if r.code != 0 {
		t.Fatalf("want exit 0:\n%s", r)
	}
	return r
}

// saveOutput keeps a plain-table output in $CORRELATOR_KUBEAPI_OUTPUT, for
// the README.
func saveOutput(t *testing.T, name string, r result) {
	t.Helper()
	dir := os.Getenv("CORRELATOR_KUBEAPI_OUTPUT")
	if dir == "" {
		return
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("creating %s: %v", dir, err)
	}
	text := "$ kubectl correlator " + strings.Join(r.args, " ") + "\n" + r.stdout
	if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
		t.Fatalf("writing %s: %v", name, err)
	}
}
