package deploy

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Pinned rendering tools. helm is built from its module with `go install`,
// so it stays out of correlator's go.mod.
const (
	HelmModule  = "helm.sh/helm/v3"
	HelmVersion = "v3.21.4"
	// KubeVersion is the Kubernetes version charts are rendered for; the
	// chart needs 1.30+ (securityContext.appArmorProfile).
	KubeVersion = "1.35.0"
)

// ToolDir is where pinned tools are built: the user's cache directory,
// outside the repository.
func ToolDir() (string, error) {
	d, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("finding the cache directory: %w", err)
	}
	return filepath.Join(d, "correlator-tools"), nil
}

// EnsureHelm returns the path of a helm binary built from HelmModule at
// HelmVersion under dir, running `go install` first when it is missing or
// of another version. The first build takes a few minutes.
func EnsureHelm(ctx context.Context, dir string) (string, error) {
	bin := filepath.Join(dir, "helm-"+HelmVersion)
	path := filepath.Join(bin, "helm")
	if v, err := moduleVersion(ctx, path); err == nil && v == HelmVersion {
		return path, nil
	}
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return "", fmt.Errorf("creating %s: %w", bin, err)
	}
	cmd := exec.CommandContext(ctx, "go", "install", HelmModule+"/cmd/helm@"+HelmVersion)
	// Module mode outside this module: helm's dependencies never touch
	// correlator's go.mod.
	cmd.Env = append(os.Environ(), "GOBIN="+bin, "GOFLAGS=-mod=mod", "GO111MODULE=on")
	cmd.Dir = os.TempDir()
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("installing helm %s: %w\n%s", HelmVersion, err, out)
	}
	v, err := moduleVersion(ctx, path)
	if err != nil {
		return "", err
	}
	if v != HelmVersion {
		return "", fmt.Errorf("checking helm: built %s, want %s", v, HelmVersion)
	}
	return path, nil
}

// moduleVersion reads the main module's version from a Go binary's build
// info (`helm version` prints only major.minor when built by go install).
func moduleVersion(ctx context.Context, path string) (string, error) {
	if _, err := os.Stat(path); err != nil {
		return "", err
	}
	out, err := exec.CommandContext(ctx, "go", "version", "-m", path).Output()
	if err != nil {
		return "", fmt.Errorf("reading build info of %s: %w", path, err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) >= 3 && f[0] == "mod" && f[1] == HelmModule {
			return f[2], nil
		}
	}
	return "", fmt.Errorf("reading build info of %s: no %s module", path, HelmModule)
}

// RenderChart runs `helm template` on chartDir for release in namespace,
// with extra arguments (--set ..., -f ...) appended.
func RenderChart(ctx context.Context, helm, chartDir, release, namespace string, args ...string) ([]byte, error) {
	full := append([]string{"template", release, chartDir, "--namespace", namespace,
		"--kube-version", KubeVersion}, args...)
	cmd := exec.CommandContext(ctx, helm, full...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("rendering chart %s: %w: %s", chartDir, err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}
