package testutil

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"testing"
)

// RuntimeEnv names the OCI runtime the container helpers run: runc (the
// default) or crun. Both take the same command line for what the harness
// does (`--root`, `run -d --bundle --pid-file`, `exec --env`, `exec
// --process`, `kill`, `state`, `delete -f`), but they enter a container
// differently: runc re-execs itself as `runc init` inside the namespaces,
// crun forks and joins them without a re-exec. Debian's crun 1.8 refuses a
// cgroup v1/v2 hybrid host ("cgroups in hybrid mode not supported"): it
// runs on pure cgroup v2 only.
const RuntimeEnv = "CORRELATOR_TEST_RUNTIME"

// Runtimes are the values RuntimeEnv may take, the default first.
var Runtimes = []string{"runc", "crun"}

// ErrRuntimeMissing is returned when the runtime named is not installed.
var ErrRuntimeMissing = errors.New("container runtime not installed")

// Runtime is the OCI runtime binary the container helpers run.
type Runtime struct {
	Name string // runc or crun
	Path string // the binary
}

// ContainerRuntime reads RuntimeEnv (the only place it is read) and finds
// the binary. Named is false when RuntimeEnv is unset, i.e. the default.
func ContainerRuntime() (rt Runtime, named bool, err error) {
	name := os.Getenv(RuntimeEnv)
	named = name != ""
	if !named {
		name = Runtimes[0]
	}
	known := false
	for _, r := range Runtimes {
		known = known || r == name
	}
	if !known {
		return Runtime{}, named, fmt.Errorf("reading %s=%q: not one of %v", RuntimeEnv, name, Runtimes)
	}
	path, err := exec.LookPath(name)
	if err != nil {
		return Runtime{Name: name}, named, fmt.Errorf("finding %s (apt-get install -y %s): %w: %w", name, name, ErrRuntimeMissing, err)
	}
	return Runtime{Name: name, Path: path}, named, nil
}

// RequireRuntime returns the runtime the container helpers run, and logs
// it. A runtime named in RuntimeEnv that is not installed skips the test,
// except under CI=true, where it fails; the default (runc) missing always
// fails, as does a name that is not a known runtime.
func RequireRuntime(t testing.TB) Runtime {
	t.Helper()
	rt, named, err := ContainerRuntime()
	if err != nil {
		if named && errors.Is(err, ErrRuntimeMissing) && !InCI() {
			t.Skipf("%v (%s names it)", err, RuntimeEnv)
		}
		t.Fatal(err)
	}
	t.Logf("container runtime: %s (%s)", rt.Name, rt.Path)
	return rt
}
