package deploy

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/execid/correlator/internal/testutil"
)

// TestInstallPathDemo drives the install path as a new user would on a
// machine with no cluster: build the binary as the image does, render the
// chart's default agent config (host paths instead of the pod's: /proc,
// no CRI socket), and run `make demo`'s script against an agent running
// that config. The demo checks its own facts and exits non-zero on a miss.
func TestInstallPathDemo(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.EnsureBPFFS(t)
	bin := correlatorBin(t)
	out := render(t, "--set", "agent.config.proc-root=/proc", "--set", "criSocket=")
	cfg, err := AgentConfig(out)
	if err != nil {
		t.Fatal(err)
	}
	cfgPath := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(cfgPath, cfg, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", "../scripts/demo.sh")
	cmd.Env = append(os.Environ(), "CORRELATOR="+bin, "DEMO_CONFIG="+cfgPath, fmt.Sprintf("DEMO_PORT=%d", freePort(t)))
	got, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("demo against the chart's config: %v\n%s", err, got)
	}
	for _, want := range []string{"agent config: " + cfgPath, "demo: done", "ok       bob's background child"} {
		if !strings.Contains(string(got), want) {
			t.Errorf("demo output lacks %q:\n%s", want, got)
		}
	}
}
