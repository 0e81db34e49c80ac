// Package testutil holds the shared test gates and the runc container harness
// used by privileged tests (BPF capture, end-to-end exec sessions).
//
// It is imported only from _test.go files.
package testutil

import (
	"errors"
	"fmt"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

const (
	// BPFFSPath is where bpffs is expected and mounted if missing.
	BPFFSPath = "/sys/fs/bpf"
	// TracefsPath is where tracefs is expected and mounted if missing.
	TracefsPath = "/sys/kernel/tracing"
)

// InCI reports whether the test runs under CI=true, where a skipped
// privileged test is a failure.
func InCI() bool { return os.Getenv("CI") == "true" }

// RequireRoot gates a privileged test. Without euid 0 the test is skipped,
// except under CI=true, where it fails: a skip there would hide that the
// privileged suite never ran.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	const reason = "privileged test: needs euid 0 (BPF, mounts, runc); run the tests as root"
	if InCI() {
		t.Fatalf("%s (under CI=true a skip is a failure)", reason)
	}
	t.Skip(reason)
}

// EnsureBPFFS requires root and mounts bpffs at /sys/fs/bpf if it is not there.
func EnsureBPFFS(t testing.TB) {
	t.Helper()
	RequireRoot(t)
	if err := ensureMount(BPFFSPath, "bpf", unix.BPF_FS_MAGIC); err != nil {
		t.Fatal(err)
	}
}

// EnsureTracefs requires root and mounts tracefs at /sys/kernel/tracing if
// it is not there.
func EnsureTracefs(t testing.TB) {
	t.Helper()
	RequireRoot(t)
	if err := ensureMount(TracefsPath, "tracefs", unix.TRACEFS_MAGIC); err != nil {
		t.Fatal(err)
	}
}

// ensureMount mounts fstype at dir unless a filesystem with that magic is
// already mounted there. A concurrent mount by another test process is fine:
// the magic is checked again after a failed mount.
func ensureMount(dir, fstype string, magic int64) error {
	if mounted(dir, magic) {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating mount point %s: %w", dir, err)
	}
	err := unix.Mount(fstype, dir, fstype, 0, "")
	if err != nil && !errors.Is(err, unix.EBUSY) {
		return fmt.Errorf("mounting %s at %s: %w", fstype, dir, err)
	}
	if !mounted(dir, magic) {
		return fmt.Errorf("checking %s at %s: not mounted after mount: %v", fstype, dir, err)
	}
	return nil
}

func mounted(dir string, magic int64) bool {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return false
	}
	return int64(st.Type) == magic
}
