package nodeharness

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/execid/correlator/internal/testutil"
	"golang.org/x/sys/unix"
)

// stop tears the node down, in order: pods (and with them their
// containers, shims and mounts) through the CRI, then containerd, then
// whatever a failure left: shims of this node's socket, runc containers
// under its runc root, mounts under its directory, the pods' cgroups; last
// the directory. Each step runs even if an earlier one failed.
func (n *Node) stop() {
	t := n.t
	var errs []error
	if n.conn != nil {
		errs = append(errs, n.stopPods())
	}
	n.cancel()
	if n.conn != nil {
		n.conn.Close()
	}
	errs = append(errs, n.stopContainerd())
	errs = append(errs, killShims(n.layout.Socket))
	errs = append(errs, removeShimSockets(n.layout.State))
	errs = append(errs, deleteRuncContainers(n.layout.RuncRoot))
	errs = append(errs, unmountUnder(n.layout.Dir))
	errs = append(errs, n.removePodCgroups())
	if err := errors.Join(errs...); err != nil {
		t.Errorf("nodeharness: tearing down the node: %v\ncontainerd log tail:\n%s", err, n.LogTail(4096))
	}
	if t.Failed() {
		t.Logf("nodeharness: containerd log tail:\n%s", n.LogTail(8192))
	}
	if err := os.RemoveAll(n.layout.Dir); err != nil {
		t.Errorf("nodeharness: removing node directory: %v", err)
	}
}

// stopContainerd sends containerd SIGTERM and waits for it to exit,
// killing it if it has not within execTimeout.
func (n *Node) stopContainerd() error {
	if n.cmd == nil || n.cmd.Process == nil {
		return nil
	}
	select {
	case <-n.exited:
		return fmt.Errorf("stopping containerd: it had exited already (%v)", n.cmd.ProcessState)
	default:
	}
	if err := n.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return fmt.Errorf("stopping containerd: %w", err)
	}
	select {
	case <-n.exited:
		return nil
	case <-time.After(execTimeout):
		_ = n.cmd.Process.Kill()
		<-n.exited
		return errors.New("stopping containerd: no exit within a minute of SIGTERM; killed")
	}
}

// killShims kills the runc shims that serve containerd at socket and are
// still running: a shim outlives containerd when its pod was not removed.
// Each is found by its -address argument and killed by PID.
func killShims(socket string) error {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return fmt.Errorf("listing processes: %w", err)
	}
	var killed []string
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(bytes.TrimRight(b, "\x00")), "\x00")
		if !strings.HasPrefix(filepath.Base(args[0]), "containerd-shim") {
			continue
		}
		for i := 0; i+1 < len(args); i++ {
			if args[i] == "-address" && args[i+1] == socket {
				if unix.Kill(pid, unix.SIGKILL) == nil {
					killed = append(killed, e.Name())
				}
			}
		}
	}
	if len(killed) > 0 {
		return fmt.Errorf("stopping shims: %d left running (PIDs %s), killed", len(killed), strings.Join(killed, " "))
	}
	return nil
}

// removeShimSockets removes the sockets of this node's shims that a killed
// shim left behind: containerd 1.6 puts every shim's socket in the fixed
// /run/containerd/s, named by a hash of containerd's address, namespace and
// sandbox ID, and records it in the task bundle's "address" file.
func removeShimSockets(state string) error {
	files, err := filepath.Glob(filepath.Join(state, "io.containerd.runtime.v2.task", "*", "*", "address"))
	if err != nil {
		return fmt.Errorf("listing shim addresses: %w", err)
	}
	var errs []error
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		sock := strings.TrimPrefix(strings.TrimSpace(string(b)), "unix://")
		if !strings.HasPrefix(sock, "/run/containerd/s/") {
			continue
		}
		if err := os.Remove(sock); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("removing shim socket %s: %w", sock, err))
		}
	}
	return errors.Join(errs...)
}

// deleteRuncContainers force-deletes every container runc still has under
// root (one directory per containerd namespace).
func deleteRuncContainers(root string) error {
	namespaces, err := os.ReadDir(root)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("listing runc roots in %s: %w", root, err)
	}
	var errs []error
	for _, ns := range namespaces {
		nsRoot := filepath.Join(root, ns.Name())
		ids, _ := os.ReadDir(nsRoot)
		for _, id := range ids {
			out, err := exec.Command("runc", "--root", nsRoot, "delete", "--force", id.Name()).CombinedOutput()
			if err != nil {
				errs = append(errs, fmt.Errorf("deleting runc container %s: %w: %s", id.Name(), err, bytes.TrimSpace(out)))
				continue
			}
			errs = append(errs, fmt.Errorf("deleting runc containers: %s was left running, deleted", id.Name()))
		}
	}
	return errors.Join(errs...)
}

// unmountUnder detaches every mount at or below dir, deepest first: a
// sandbox's /dev/shm, a container's rootfs, a snapshot a failure left.
func unmountUnder(dir string) error {
	mounts, err := testutil.MountPoints(func(string) bool { return true })
	if err != nil {
		return err
	}
	var under []string
	for _, m := range mounts {
		if m == dir || strings.HasPrefix(m, dir+"/") {
			under = append(under, m)
		}
	}
	sort.Sort(sort.Reverse(sort.StringSlice(under)))
	var errs []error
	for _, m := range under {
		if err := unix.Unmount(m, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("unmounting %s: %w", m, err))
		}
	}
	return errors.Join(errs...)
}
