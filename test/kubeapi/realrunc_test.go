//go:build e2ecluster

package kubeapi

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// runcVersion is the runc current containerd and CRI-O releases ship,
// built from the Go module proxy beside Debian's 1.1.
const runcVersion = "v1.4.0"

// buildRunc builds runc at runcVersion with seccomp (the chart's agent
// runs under RuntimeDefault), outside any module: cgo and libseccomp-dev.
func buildRunc(t *testing.T) string {
	t.Helper()
	start := time.Now()
	dir := t.TempDir()
	cmd := exec.Command("go", "install", "-tags", "seccomp", "github.com/opencontainers/runc@"+runcVersion)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOBIN="+dir, "CGO_ENABLED=1", "GOFLAGS=")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building runc %s (needs gcc and libseccomp-dev: make deps-test): %v\n%s", runcVersion, err, out)
	}
	bin := filepath.Join(dir, "runc")
	if v := runcVersionOf(t, bin); "v"+v != runcVersion {
		t.Fatalf("built runc %s, want %s", v, runcVersion)
	}
	t.Logf("built runc %s in %s", runcVersion, time.Since(start).Round(time.Millisecond))
	return bin
}

// runcVersionOf is the version `runc --version` reports.
func runcVersionOf(t *testing.T, runc string) string {
	t.Helper()
	out, err := exec.Command(runc, "--version").Output()
	if err != nil {
		t.Fatalf("running %s --version: %v", runc, err)
	}
	v, ok := strings.CutPrefix(strings.SplitN(string(out), "\n", 2)[0], "runc version ")
	if !ok {
		t.Fatalf("%s --version: %q", runc, out)
	}
	return strings.TrimSpace(v)
}
