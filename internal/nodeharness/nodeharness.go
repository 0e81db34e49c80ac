// Package nodeharness runs a throwaway Kubernetes-shaped node for
// privileged tests: Debian's containerd 1.6 started as a child process with
// a generated config (its own root, state, sockets and runc root, so a
// containerd the machine already runs is left alone), the CRI plugin on the
// cgroupfs driver, images built offline by internal/ociimage and imported
// into the k8s.io namespace, and pods run through the CRI the way the
// kubelet runs them: kubelet-shaped cgroup parents, the io.kubernetes.*
// labels, host-network sandboxes so that no CNI plugin is needed.
//
// Execs go two ways. ExecWithEnv and StartExec take the path a KEP-6035
// runtime takes inside its CRI server: the container's process spec from
// containerd, the command replaced, the exec's environment merged into the
// baseline (MergeExecEnv), started through containerd's task API (the shim,
// then `runc exec`). CRIExec goes through the CRI's own ExecSync, which in
// containerd 1.6 has no environment at all: the fallback path.
//
// It is imported only from _test.go files.
package nodeharness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	containersapi "github.com/containerd/containerd/api/services/containers/v1"
	tasksapi "github.com/containerd/containerd/api/services/tasks/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/execid/correlator/internal/ociimage"
	"github.com/execid/correlator/internal/testutil"
)

// Namespace is the containerd namespace of the CRI plugin.
const Namespace = "k8s.io"

// Options configure Start. The zero value is a node with the pause and
// busybox images.
type Options struct {
	// Snapshotter is containerd's snapshotter for the CRI and the imports:
	// "overlayfs" or "native". Empty picks overlayfs when a probe overlay
	// mounts in the node's directory, else native.
	Snapshotter string
	// Archives are more OCI image-layout archives to import, e.g. one
	// written by ociimage.Correlator.
	Archives []string
	// Runc is the runc binary the CRI's runtime runs (its BinaryName), e.g.
	// one built from the Go module proxy; empty: Debian's, on the PATH.
	Runc string
}

// Timings say where a Start spent its time.
type Timings struct {
	Install    time.Duration // apt-get install containerd; zero if it was there
	Images     time.Duration // building the pause and busybox archives
	Containerd time.Duration // from spawning containerd to its CRI answering
	Import     time.Duration // importing every archive, until the CRI lists them
}

// Node is one running containerd with its CRI.
type Node struct {
	// Socket is containerd's gRPC socket, which serves the CRI too: what a
	// kubelet's --container-runtime-endpoint and the agent's criSocket name.
	Socket string
	// Runc is the runc binary the CRI's runtime runs.
	Runc string
	// Snapshotter is the snapshotter the CRI and the imports use.
	Snapshotter string
	Timings     Timings
	// Runtime and Images are CRI clients on Socket.
	Runtime runtimeapi.RuntimeServiceClient
	Images  runtimeapi.ImageServiceClient

	t          testing.TB
	layout     layout
	ctr        string
	ctx        context.Context
	cancel     context.CancelFunc
	cmd        *exec.Cmd
	exited     chan struct{}
	conn       *grpc.ClientConn
	tasks      tasksapi.TasksClient
	containers containersapi.ContainersClient
	pods       map[string]*runtimeapi.PodSandboxConfig
	podUIDs    []string
}

// Start starts a node and registers its teardown with t.Cleanup. It needs
// root (testutil.RequireRoot), and containerd, ctr and
// containerd-shim-runc-v2 from Debian's containerd package, which it
// installs with apt-get when they are missing.
func Start(t testing.TB, opts Options) *Node {
	t.Helper()
	testutil.RequireRoot(t)
	n := &Node{t: t, pods: map[string]*runtimeapi.PodSandboxConfig{}}
	began := time.Now()
	containerd, ctr, err := ensureContainerd(t)
	if err != nil {
		t.Fatal(err)
	}
	n.Timings.Install, n.ctr = time.Since(began), ctr

	// A short directory of our own rather than t.TempDir(): unix socket
	// paths are limited to 107 bytes, and test names are long.
	dir, err := os.MkdirTemp("", "nodeharness-")
	if err != nil {
		t.Fatalf("creating node directory: %v", err)
	}
	n.layout = newLayout(dir)
	n.Socket = n.layout.Socket
	n.ctx, n.cancel = context.WithCancel(context.Background())
	t.Cleanup(n.stop)
	if err := n.layout.mkdirs(); err != nil {
		t.Fatal(err)
	}

	began = time.Now()
	archives, err := buildImages(dir)
	if err != nil {
		t.Fatal(err)
	}
	n.Timings.Images = time.Since(began)

	n.Snapshotter = opts.Snapshotter
	if n.Runc = opts.Runc; n.Runc == "" {
		if n.Runc, err = lookPath("runc"); err != nil {
			t.Fatal(err)
		}
	}
	if n.Snapshotter == "" {
		n.Snapshotter = "overlayfs"
		if err := probeOverlay(dir); err != nil {
			t.Logf("nodeharness: using the native snapshotter: %v", err)
			n.Snapshotter = "native"
		}
	}
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	cfg := renderConfig(configParams{layout: n.layout, Snapshotter: n.Snapshotter,
		SandboxImage: ociimage.PauseRef, StreamPort: port, Runc: opts.Runc})
	if err := os.WriteFile(n.layout.Config, []byte(cfg), 0o600); err != nil {
		t.Fatalf("writing containerd config: %v", err)
	}

	began = time.Now()
	if err := n.startContainerd(containerd); err != nil {
		t.Fatal(err)
	}
	n.waitReady()
	n.Timings.Containerd = time.Since(began)

	began = time.Now()
	for _, a := range append(archives, opts.Archives...) {
		if err := n.importArchive(a); err != nil {
			t.Fatal(err)
		}
	}
	for _, ref := range []string{ociimage.PauseRef, ociimage.BusyboxRef} {
		n.WaitImage(ref)
	}
	n.Timings.Import = time.Since(began)
	return n
}

// ensureContainerd finds containerd and ctr, and checks for
// containerd-shim-runc-v2 and runc, installing Debian's containerd package
// when any is missing. Start has checked that we are root.
func ensureContainerd(t testing.TB) (containerd, ctr string, err error) {
	t.Helper()
	find := func() error {
		var errs []error
		var err error
		if containerd, err = lookPath("containerd"); err != nil {
			errs = append(errs, err)
		}
		if ctr, err = lookPath("ctr"); err != nil {
			errs = append(errs, err)
		}
		for _, name := range []string{"containerd-shim-runc-v2", "runc"} {
			if _, err := lookPath(name); err != nil {
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	}
	if find() == nil {
		return containerd, ctr, nil
	}
	t.Logf("nodeharness: containerd is not installed: installing Debian's containerd package with apt-get")
	if err := aptInstall("containerd", "runc"); err != nil {
		return "", "", fmt.Errorf("installing containerd (Debian package containerd): %w", err)
	}
	if err := find(); err != nil {
		return "", "", fmt.Errorf("finding containerd after installing Debian's containerd package: %w", err)
	}
	return containerd, ctr, nil
}

// systemPath is the PATH containerd runs with: the test's, then the
// directories Debian installs containerd, its shims and runc in (root's
// PATH may lack /usr/sbin). containerd starts its shims, and they runc,
// from PATH.
func systemPath() string {
	path := os.Getenv("PATH")
	have := map[string]bool{}
	for _, d := range strings.Split(path, ":") {
		have[d] = true
	}
	for _, d := range []string{"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"} {
		if !have[d] {
			path += ":" + d
		}
	}
	return strings.TrimPrefix(path, ":")
}

// lookPath finds an executable on systemPath.
func lookPath(name string) (string, error) {
	for _, d := range strings.Split(systemPath(), ":") {
		if d == "" {
			continue
		}
		p := d + "/" + name
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("finding %s: not on %s", name, systemPath())
}

// aptInstall installs Debian packages, running apt-get update first only
// if the install fails for want of package lists.
func aptInstall(pkgs ...string) error {
	install := func() ([]byte, error) {
		args := append([]string{"-o", "DPkg::Lock::Timeout=300", "install", "-y", "-qq",
			"--no-install-recommends", "--no-upgrade"}, pkgs...)
		cmd := exec.Command("apt-get", args...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		return cmd.CombinedOutput()
	}
	if _, err := install(); err == nil {
		return nil
	}
	update := exec.Command("apt-get", "-o", "DPkg::Lock::Timeout=300", "update", "-qq")
	if out, err := update.CombinedOutput(); err != nil {
		return fmt.Errorf("running apt-get update: %w: %s", err, bytes.TrimSpace(out))
	}
	if out, err := install(); err != nil {
		return fmt.Errorf("running apt-get install %s: %w: %s", strings.Join(pkgs, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// buildImages writes the pause and busybox archives into dir.
func buildImages(dir string) ([]string, error) {
	pause, busybox := dir+"/pause.oci.tar", dir+"/busybox.oci.tar"
	if err := ociimage.Pause(pause); err != nil {
		return nil, fmt.Errorf("building the pause image: %w", err)
	}
	if err := ociimage.Busybox(busybox); err != nil {
		return nil, fmt.Errorf("building the busybox image: %w", err)
	}
	return []string{pause, busybox}, nil
}

// startContainerd spawns containerd with the node's config, its output in
// the node's log. It dies with the test process (Pdeathsig), and runs in
// its own process group so a terminal's ^C reaches only the test.
func (n *Node) startContainerd(containerd string) error {
	logf, err := os.OpenFile(n.layout.Log, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("creating containerd log: %w", err)
	}
	defer logf.Close()
	n.cmd = exec.Command(containerd, "--config", n.layout.Config)
	n.cmd.Stdout, n.cmd.Stderr = logf, logf
	n.cmd.Env = append(os.Environ(), "PATH="+systemPath())
	n.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := n.cmd.Start(); err != nil {
		return fmt.Errorf("starting containerd: %w", err)
	}
	n.exited = make(chan struct{})
	go func() {
		_ = n.cmd.Wait()
		close(n.exited)
	}()
	n.conn, err = grpc.NewClient("unix:"+n.layout.Socket,
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("creating containerd client: %w", err)
	}
	n.Runtime = runtimeapi.NewRuntimeServiceClient(n.conn)
	n.Images = runtimeapi.NewImageServiceClient(n.conn)
	n.tasks = tasksapi.NewTasksClient(n.conn)
	n.containers = containersapi.NewContainersClient(n.conn)
	return nil
}

// waitReady waits until containerd's socket exists, then until the CRI
// answers Version, failing at once, with containerd's log, if containerd
// exits. No RPC is made before the socket exists: a refused first connect
// would put the gRPC client into its reconnect backoff, a second or more.
func (n *Node) waitReady() {
	n.t.Helper()
	running := func() {
		select {
		case <-n.exited:
			n.t.Fatalf("containerd exited while starting (%v); its log:\n%s", n.cmd.ProcessState, n.LogTail(4096))
		default:
		}
	}
	testutil.Eventually(n.t, "containerd listens on "+n.layout.Socket, func() bool {
		running()
		st, err := os.Stat(n.layout.Socket)
		return err == nil && st.Mode()&os.ModeSocket != 0
	})
	testutil.EventuallyNil(n.t, func() error {
		running()
		ctx, cancel := context.WithTimeout(n.ctx, time.Second)
		defer cancel()
		if _, err := n.Runtime.Version(ctx, &runtimeapi.VersionRequest{}); err != nil {
			return fmt.Errorf("waiting for the CRI at %s: %w", n.layout.Socket, err)
		}
		return nil
	})
}

// importArchive imports an OCI archive into the CRI's namespace and
// unpacks it for the node's snapshotter, with ctr, as an operator would.
func (n *Node) importArchive(archive string) error {
	cmd := exec.CommandContext(n.ctx, n.ctr, "--address", n.layout.Socket, "--namespace", Namespace,
		"images", "import", "--snapshotter", n.Snapshotter, archive)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("importing %s: %w: %s", archive, err, bytes.TrimSpace(out))
	}
	return nil
}

// WaitImage waits until the CRI's image service knows ref: the CRI plugin
// learns of an imported image from containerd's events, not at once. Start
// waits for the pause and busybox images; a test waits for the images of
// its Options.Archives before it runs them.
func (n *Node) WaitImage(ref string) {
	n.t.Helper()
	testutil.EventuallyNil(n.t, func() error {
		resp, err := n.Images.ImageStatus(n.ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: ref}})
		if err != nil {
			return fmt.Errorf("asking the CRI for image %s: %w", ref, err)
		}
		if resp.GetImage() == nil {
			return fmt.Errorf("waiting for the CRI to list image %s", ref)
		}
		return nil
	})
}

// LogTail returns at most max bytes from the end of containerd's log.
func (n *Node) LogTail(max int) string {
	b, err := os.ReadFile(n.layout.Log)
	if err != nil {
		return fmt.Sprintf("(reading containerd log: %v)", err)
	}
	if len(b) > max {
		b = b[len(b)-max:]
	}
	return string(b)
}

// Dir is the node's directory.
func (n *Node) Dir() string { return n.layout.Dir }

// CNIConfDir is the CRI's CNI configuration directory, empty as Start
// leaves it: the CRI then reports its network not ready, and a kubelet
// keeps its node NotReady. A test that runs a kubelet writes a network
// list there; host-network pods never call a CNI plugin.
func (n *Node) CNIConfDir() string { return n.layout.CNIConf }
