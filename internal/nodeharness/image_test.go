package nodeharness

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/execid/correlator/internal/ociimage"
	"github.com/execid/correlator/internal/testutil"
)

// TestNodeNativeSnapshotter runs a pod and an exec on the native
// snapshotter, the fallback where overlay cannot be mounted.
func TestNodeNativeSnapshotter(t *testing.T) {
	testutil.RequireRoot(t)
	n := Start(t, Options{Snapshotter: "native"})
	pod, err := n.RunPod("default", "native", testutil.RandomUUID(), nil)
	if err != nil {
		t.Fatal(err)
	}
	c, err := n.StartContainer(pod, "app", ociimage.BusyboxRef, []string{"/bin/sleep", "100000"})
	if err != nil {
		t.Fatal(err)
	}
	out, err := n.ExecWithEnv(c, []string{"/bin/echo", "native"})
	if err != nil || out != "native\n" {
		t.Fatalf("echo: %q, %v", out, err)
	}
}

// TestNodeCorrelatorImage builds correlator's static binary and image the
// way `make image` should, imports it, and runs it as a container with the
// image's own entrypoint and default arguments (--help).
func TestNodeCorrelatorImage(t *testing.T) {
	testutil.RequireRoot(t)
	dir := t.TempDir()
	bin, archive := filepath.Join(dir, "correlator"), filepath.Join(dir, "correlator.oci.tar")
	build := exec.Command("go", "build", "-trimpath", "-o", bin, "github.com/execid/correlator/cmd/correlator")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building correlator: %v: %s", err, out)
	}
	if err := ociimage.Correlator(archive, bin); err != nil {
		t.Fatal(err)
	}
	n := Start(t, Options{Archives: []string{archive}})
	n.WaitImage(ociimage.CorrelatorRef)
	pod, err := n.RunPod("correlator", "agent", testutil.RandomUUID(), map[string]string{"app.kubernetes.io/name": "correlator"})
	if err != nil {
		t.Fatal(err)
	}
	c, err := n.StartContainer(pod, "agent", ociimage.CorrelatorRef, nil)
	if err != nil {
		t.Fatal(err)
	}
	var st *runtimeapi.ContainerStatus
	testutil.EventuallyNil(t, func() error {
		resp, err := n.Runtime.ContainerStatus(n.ctx, &runtimeapi.ContainerStatusRequest{ContainerId: c})
		if err != nil {
			return err
		}
		if st = resp.GetStatus(); st.GetState() != runtimeapi.ContainerState_CONTAINER_EXITED {
			return fmt.Errorf("waiting for correlator --help to exit: %s", st.GetState())
		}
		return nil
	})
	log, _ := os.ReadFile(st.GetLogPath())
	if st.GetExitCode() != 0 || !strings.Contains(string(log), "Usage:") {
		t.Fatalf("correlator --help in its image: exit %d, log\n%s", st.GetExitCode(), log)
	}
}
