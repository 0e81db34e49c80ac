package testutil

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// cgroupLockPath serialises creation of Kubernetes-shaped cgroups against
// removal of their shared parents (/kubepods, /kubepods/burstable) across
// test processes: `go test ./...` runs packages in parallel.
const cgroupLockPath = "/run/correlator-testutil-cgroups.lock"

// LockCgroups takes the cgroup lock (unix.LOCK_SH to create, LOCK_EX to
// remove) that every harness making Kubernetes-shaped cgroups shares: runc
// containers here and containerd pods in internal/nodeharness.
func LockCgroups(how int) (func(), error) {
	f, err := os.OpenFile(cgroupLockPath, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening cgroup lock %s: %w", cgroupLockPath, err)
	}
	if err := unix.Flock(int(f.Fd()), how); err != nil {
		f.Close()
		return nil, fmt.Errorf("locking cgroup lock %s: %w", cgroupLockPath, err)
	}
	return func() { f.Close() }, nil
}

// CgroupMounts lists the mount points of cgroup and cgroup2 filesystems.
func CgroupMounts() ([]string, error) {
	return MountPoints(func(fstype string) bool { return fstype == "cgroup" || fstype == "cgroup2" })
}

// MountPoints lists the mount points in /proc/self/mountinfo whose
// filesystem type keep accepts.
func MountPoints(keep func(fstype string) bool) ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("opening mountinfo: %w", err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// "36 35 0:30 / /sys/fs/cgroup/cpu rw,relatime shared:9 - cgroup cgroup rw,cpu"
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		fields, postFields := strings.Fields(pre), strings.Fields(post)
		if !ok || len(fields) < 5 || len(postFields) < 1 {
			continue
		}
		if keep(postFields[0]) {
			out = append(out, unescapeMount(fields[4]))
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading mountinfo: %w", err)
	}
	return out, nil
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
