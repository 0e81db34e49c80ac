package testutil

import (
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// PrivateBPFFS gives the calling test goroutine a mount namespace of its
// own with a fresh, empty bpffs at /sys/fs/bpf. Processes the goroutine
// starts (os/exec forks from the calling thread) inherit it, so whatever
// they pin lands there, where the test can see all of it, and nothing the
// machine or a concurrent test pinned is in the way. The goroutine stays
// locked to its thread, which the runtime ends with the test: call it from
// the test's own goroutine, never from a parallel one it shares.
func PrivateBPFFS(t testing.TB) {
	t.Helper()
	RequireRoot(t)
	runtime.LockOSThread() // never unlocked: the thread dies with the test
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		t.Fatalf("unsharing the mount namespace: %v", err)
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		t.Fatalf("making mounts private: %v", err)
	}
	if err := unix.Mount("bpffs", BPFFSPath, "bpf", 0, ""); err != nil {
		t.Fatalf("mounting a private bpffs at %s: %v", BPFFSPath, err)
	}
}
