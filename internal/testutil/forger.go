package testutil

import (
	_ "embed"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// forgerSource is the intruder's helper for the adversarial tests: a static
// program that execs under a borrowed audit ID in ways busybox cannot. Its
// modes, OP syntax and exit statuses are documented at the top of the file.
//
//go:embed forger/forger.c
var forgerSource []byte

// Exit statuses of the forger, from forger/forger.c.
const (
	ForgerExitExec  = 1 // executing PROG failed
	ForgerExitUsage = 2 // bad arguments
	ForgerExitSys   = 3 // memory or pipe setup failed
	ForgerExitSpawn = 4 // creating the thread or the clone child failed
	ForgerExitProc  = 5 // reading /proc/PID/environ failed
	ForgerExitNoKey = 6 // steal: KEY is not in /proc/PID/environ
)

// ForgerBinEnv names a prebuilt static forger that BuildForger returns
// instead of compiling one: the kernel matrix's arm64 guests have no
// compiler, so the host cross-compiles it (scripts/e2e-kernels/run.sh).
const ForgerBinEnv = "CORRELATOR_TEST_FORGER_BIN"

// BuildForger compiles the forger with `gcc -static` (clang when there is no
// gcc) into t.TempDir() and returns the binary's path, for
// ContainerConfig.Files:
//
//	Files: map[string]string{"/bin/forger": testutil.BuildForger(t)}
//
// It does not need root. A build takes about half a second; a test that
// starts several containers can build once and share the path. With
// ForgerBinEnv set, it returns that binary, once it is checked static.
func BuildForger(t testing.TB) string {
	t.Helper()
	if bin := os.Getenv(ForgerBinEnv); bin != "" {
		if err := checkStatic(bin, "build it with gcc -static"); err != nil {
			t.Fatalf("using the prebuilt forger (%s): %v", ForgerBinEnv, err)
		}
		return bin
	}
	bin, err := buildForger(t.TempDir())
	if err != nil {
		t.Fatalf("building forger: %v", err)
	}
	return bin
}

func buildForger(dir string) (string, error) {
	cc, err := exec.LookPath("gcc")
	if err != nil {
		// CI installs clang for `make generate`; Debian's clang pulls in
		// libc6-dev and libgcc, which is all a static build needs.
		if cc, err = exec.LookPath("clang"); err != nil {
			return "", fmt.Errorf("finding gcc or clang (apt-get install -y gcc libc6-dev): %w", err)
		}
	}
	src := filepath.Join(dir, "forger.c")
	if err := os.WriteFile(src, forgerSource, 0o644); err != nil {
		return "", fmt.Errorf("writing forger source: %w", err)
	}
	bin := filepath.Join(dir, "forger")
	cmd := exec.Command(cc, "-static", "-O2", "-pthread", "-Wall", "-Wextra", "-o", bin, src)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("compiling %s with %s (a static build needs glibc's libc.a: apt-get install -y gcc libc6-dev): %w: %s",
			src, cc, err, strings.TrimSpace(string(out)))
	}
	if err := checkStatic(bin, cc+" -static produced a dynamic binary"); err != nil {
		return "", err
	}
	return bin, nil
}
