package testutil

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Cgroup placement, measured with Debian's runc 1.1.5 on the cgroup v1/v2
// hybrid layout of these machines (v1 controllers under /sys/fs/cgroup/<ctrl>,
// a named name=systemd v1 hierarchy at /sys/fs/cgroup/systemd, cgroup2 at
// /sys/fs/cgroup/unified). runc's cgroupfs driver takes cgroupsPath as an
// absolute path and creates it in EVERY hierarchy: all eight v1 controllers,
// name=systemd, and, because the host is in hybrid mode, the unified cgroup2
// tree too. The init and every exec'd process read the same path on every
// line of /proc/<pid>/cgroup:
//
//	9:name=systemd:/kubepods/burstable/pod<uid>/<64-hex id>
//	8:pids:/kubepods/burstable/pod<uid>/<64-hex id>
//	7:blkio:... 6:freezer:... 5:devices:... 4:memory:... 3:cpuset:... 2:cpuacct:...
//	1:cpu:/kubepods/burstable/pod<uid>/<64-hex id>
//	0::/kubepods/burstable/pod<uid>/<64-hex id>
//
// The "0::" line is the cgroup2 one, the cgroup whose kernfs ID BPF's
// bpf_get_current_cgroup_id() returns. `runc delete` removes the leaf in all
// hierarchies but leaves pod<uid>, burstable and kubepods, which
// removeCgroups cleans up. TestContainerCgroupPlacement asserts every line.
//
// Process tree: the detached init is reparented to host PID 1; an exec'd
// process is a child of the host-side `runc exec` (a child subreaper), i.e.
// its parent is outside the container, as with a real kubectl exec.

// ContainerConfig describes a test container. Zero values get defaults.
type ContainerConfig struct {
	// ID is the 64-hex container ID, also the runc container name.
	// Default: RandomContainerID().
	ID string
	// PodUID goes into the cgroup path. Default: RandomUUID().
	PodUID string
	// QoS is the kubepods QoS class path element. Default: "burstable".
	QoS string
	// CgroupPath is runc's cgroupsPath. Default: the kubelet's cgroupfs
	// layout, /kubepods/<QoS>/pod<PodUID>/<ID>. runc's cgroupfs driver
	// takes any absolute path, so a test can give the systemd driver's
	// names (/kubepods.slice/.../cri-containerd-<ID>.scope); the path must
	// be under /kubepods*, whose empty parents Destroy removes.
	CgroupPath string
	// Args of the container's init process. Default: /bin/sleep 100000.
	Args []string
	// Env is the baseline process environment, which `runc exec` inherits.
	// Default: PATH=/bin, HOSTNAME=<Hostname>, HOME=/root. Note that runc
	// appends HOME=<user's home> after every --env value when the env has no
	// HOME, which would push an injected key off the last position; the
	// default sets HOME so `Exec --env K=V` really puts K last.
	Env []string
	// Hostname of the UTS namespace. Default: "pod-" + first 8 of PodUID.
	Hostname string
	// Files maps an absolute rootfs path to a host file copied there with
	// mode 0755, replacing any busybox applet link of that name; e.g.
	// {"/bin/forger": BuildForger(t)}. The rootfs has no libc: binaries
	// must be static.
	Files map[string]string
}

// Container is a detached container with its own state root, run by runc
// or, with CORRELATOR_TEST_RUNTIME=crun, by crun (see RuntimeEnv).
type Container struct {
	ID         string
	PodUID     string
	CgroupPath string // cgroupsPath: /kubepods/<qos>/pod<uid>/<id> unless configured
	Bundle     string
	StateRoot  string // the runtime's --root
	Env        []string
	Runtime    Runtime // runc or crun
	// Nice, when set, is the niceness its execs run at (the runtime and
	// what it execs inherit it): a soak's load a node's agent outranks.
	Nice int

	initPID int
}

// NewContainer starts a container with the runtime RequireRuntime gives
// (runc unless CORRELATOR_TEST_RUNTIME says crun), logs which, and
// registers its teardown with t.Cleanup. It requires root and fails the
// test if the runtime or a static busybox is missing.
func NewContainer(t testing.TB, cfg ContainerConfig) *Container {
	t.Helper()
	RequireRoot(t)
	rt := RequireRuntime(t)
	c, err := newContainer(t.TempDir(), rt, cfg)
	if err != nil {
		t.Fatalf("starting %s container: %v", rt.Name, err)
	}
	t.Cleanup(func() {
		if err := c.Destroy(); err != nil {
			t.Errorf("destroying %s container %s: %v", rt.Name, c.ID, err)
		}
	})
	return c
}

func newContainer(dir string, rt Runtime, cfg ContainerConfig) (*Container, error) {
	busybox, err := exec.LookPath("busybox")
	if err != nil {
		return nil, fmt.Errorf("finding busybox (apt-get install -y busybox-static): %w", err)
	}
	if err := checkStatic(busybox, "install busybox-static"); err != nil {
		return nil, err
	}
	if cfg.ID == "" {
		cfg.ID = RandomContainerID()
	}
	if cfg.PodUID == "" {
		cfg.PodUID = RandomUUID()
	}
	if cfg.QoS == "" {
		cfg.QoS = "burstable"
	}
	if len(cfg.Args) == 0 {
		cfg.Args = []string{"/bin/sleep", "100000"}
	}
	if cfg.CgroupPath == "" {
		cfg.CgroupPath = fmt.Sprintf("/kubepods/%s/pod%s/%s", cfg.QoS, cfg.PodUID, cfg.ID)
	}
	if !strings.HasPrefix(cfg.CgroupPath, "/kubepods") {
		return nil, fmt.Errorf("cgroupsPath %q: not under /kubepods*, whose parents Destroy removes", cfg.CgroupPath)
	}
	if cfg.Hostname == "" {
		cfg.Hostname = "pod-" + cfg.PodUID[:min(8, len(cfg.PodUID))]
	}
	if cfg.Env == nil {
		cfg.Env = []string{"PATH=/bin", "HOSTNAME=" + cfg.Hostname, "HOME=/root"}
	}
	c := &Container{
		ID:         cfg.ID,
		PodUID:     cfg.PodUID,
		CgroupPath: cfg.CgroupPath,
		Bundle:     filepath.Join(dir, "bundle"),
		StateRoot:  filepath.Join(dir, "state"),
		Env:        append([]string(nil), cfg.Env...),
		Runtime:    rt,
	}
	spec := newSpec(cfg.Args, c.Env, cfg.Hostname, c.CgroupPath)
	if err := writeBundle(c.Bundle, busybox, cfg.Files, spec); err != nil {
		return nil, fmt.Errorf("writing bundle: %w", err)
	}
	if err := c.start(); err != nil {
		_ = c.Destroy()
		return nil, err
	}
	return c, nil
}

// start runs `runc run -d` (or crun's). Detached without a terminal, runc hands its own
// stdio to the init process, so stdio goes to files: a pipe would stay open
// for the container's lifetime and block cmd.Wait.
func (c *Container) start() error {
	unlock, err := LockCgroups(unix.LOCK_SH)
	if err != nil {
		return err
	}
	defer unlock()
	log, err := os.Create(filepath.Join(c.Bundle, "init.log"))
	if err != nil {
		return fmt.Errorf("creating init log: %w", err)
	}
	defer log.Close()
	pidFile := filepath.Join(c.Bundle, "init.pid")
	cmd := exec.Command(c.Runtime.Path, "--root", c.StateRoot, "run", "-d",
		"--bundle", c.Bundle, "--pid-file", pidFile, c.ID)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Run(); err != nil {
		out, _ := os.ReadFile(log.Name())
		return fmt.Errorf("running %s run: %w: %s", c.Runtime.Name, err, strings.TrimSpace(string(out)))
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		return fmt.Errorf("reading pid file: %w", err)
	}
	c.initPID, err = strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return fmt.Errorf("parsing pid file %q: %w", b, err)
	}
	return nil
}

// InitPID is the host PID of the container's init process.
func (c *Container) InitPID() int { return c.initPID }

// Exec runs `runc exec --env K=V... <id> args...`. runc appends --env values
// after the baseline env from config.json, so an injected key sits LAST, as
// containerd puts it. Combined stdout and stderr are returned. Note that
// busybox `sh -c "cmd"` execs a lone or final simple command in place (same
// PID); append "; true" when a test needs the command to be a child. runc
// exec returns only once every holder of the session's stdout and stderr has
// closed them, so a process left running must redirect them (>/dev/null 2>&1).
//
// crun's `exec --env` replaces the environment instead of appending to
// config.json's, so with crun the same environment goes in a process file
// (ExecProcess), as containerd hands any runtime an exec.
func (c *Container) Exec(ctx context.Context, args []string, extraEnv ...string) ([]byte, error) {
	if c.Runtime.Name == "crun" && len(extraEnv) > 0 {
		return c.ExecProcess(ctx, append(slices.Clip(c.Env), extraEnv...), args)
	}
	runcArgs := []string{"--root", c.StateRoot, "exec"}
	for _, kv := range extraEnv {
		runcArgs = append(runcArgs, "--env", kv)
	}
	runcArgs = append(runcArgs, c.ID)
	runcArgs = append(runcArgs, args...)
	return c.run(ctx, runcArgs)
}

// ExecProcess runs `runc exec --process <file> <id>` with exactly env, in
// that order, so a test can put the key first (the KEP-6035 order), in the
// middle, or duplicated. The baseline env is not added. One runc quirk: if
// env has no HOME, runc appends HOME=<user's passwd home> at the end.
func (c *Container) ExecProcess(ctx context.Context, env []string, args []string) ([]byte, error) {
	f, err := os.CreateTemp(c.Bundle, "process-*.json")
	if err != nil {
		return nil, fmt.Errorf("creating process file: %w", err)
	}
	f.Close()
	defer os.Remove(f.Name())
	if err := writeJSON(f.Name(), newProcess(args, env)); err != nil {
		return nil, err
	}
	return c.run(ctx, []string{"--root", c.StateRoot, "exec", "--process", f.Name(), c.ID})
}

// run executes runc with output in a file rather than a pipe: an exec'd
// process may leave a daemon behind that keeps the write end open.
func (c *Container) run(ctx context.Context, args []string) ([]byte, error) {
	out, err := os.CreateTemp(c.Bundle, "exec-*.out")
	if err != nil {
		return nil, fmt.Errorf("creating exec output file: %w", err)
	}
	defer os.Remove(out.Name())
	defer out.Close()
	cmd := exec.CommandContext(ctx, c.Runtime.Path, args...)
	if c.Nice != 0 {
		cmd = exec.CommandContext(ctx, "nice", append([]string{"-n", strconv.Itoa(c.Nice), c.Runtime.Path}, args...)...)
	}
	cmd.Stdout, cmd.Stderr = out, out
	runErr := cmd.Run()
	b, err := os.ReadFile(out.Name())
	if err != nil {
		return nil, fmt.Errorf("reading exec output: %w", err)
	}
	if runErr != nil {
		return b, fmt.Errorf("running %s exec in container %s: %w", c.Runtime.Name, c.ID, runErr)
	}
	return b, nil
}

// Destroy kills and deletes the container and removes the cgroup
// directories runc leaves behind. It is idempotent; NewContainer registers
// it with t.Cleanup.
func (c *Container) Destroy() error {
	var errs []error
	if c.initPID > 0 {
		_ = exec.Command(c.Runtime.Path, "--root", c.StateRoot, "kill", c.ID, "KILL").Run()
		c.waitStopped(EventuallyBound)
	}
	if out, err := exec.Command(c.Runtime.Path, "--root", c.StateRoot, "delete", "-f", c.ID).CombinedOutput(); err != nil &&
		!strings.Contains(string(out), "does not exist") {
		errs = append(errs, fmt.Errorf("running %s delete: %w: %s", c.Runtime.Name, err, strings.TrimSpace(string(out))))
	}
	if err := removeCgroups(c.CgroupPath); err != nil {
		errs = append(errs, err)
	}
	if err := os.RemoveAll(filepath.Join(c.StateRoot, c.ID)); err != nil {
		errs = append(errs, fmt.Errorf("removing %s state: %w", c.Runtime.Name, err))
	}
	return errors.Join(errs...)
}

func (c *Container) waitStopped(timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		out, err := exec.Command(c.Runtime.Path, "--root", c.StateRoot, "state", c.ID).Output()
		if err != nil {
			return
		}
		var st struct {
			Status string `json:"status"`
		}
		if json.Unmarshal(out, &st) == nil && st.Status == "stopped" {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// removeCgroups removes cgroupPath and its now-empty kubepods parents from
// every mounted cgroup hierarchy. A parent still used by another container
// fails with EBUSY/ENOTEMPTY and is left alone.
func removeCgroups(cgroupPath string) error {
	unlock, err := LockCgroups(unix.LOCK_EX)
	if err != nil {
		return err
	}
	defer unlock()
	mounts, err := CgroupMounts()
	if err != nil {
		return err
	}
	var errs []error
	for _, m := range mounts {
		for p := cgroupPath; p != "/" && p != "." && strings.HasPrefix(p, "/kubepods"); p = filepath.Dir(p) {
			err := rmdirRetry(filepath.Join(m, p), p == cgroupPath)
			if err != nil && !errors.Is(err, unix.ENOENT) {
				if p == cgroupPath {
					errs = append(errs, fmt.Errorf("removing cgroup %s: %w", filepath.Join(m, p), err))
				}
				break
			}
		}
	}
	return errors.Join(errs...)
}

// rmdirRetry retries EBUSY on the container's own cgroup: killed tasks
// leave the cgroup asynchronously, later on a busy machine.
func rmdirRetry(dir string, retry bool) error {
	deadline := time.Now().Add(EventuallyBound)
	for {
		err := unix.Rmdir(dir)
		if err == nil || !retry || !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}
