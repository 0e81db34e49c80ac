package testutil

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// CgroupHierarchy returns where the hierarchy that carries controller is
// mounted, from /proc/self/mountinfo: "" names the cgroup2 (unified)
// hierarchy, at /sys/fs/cgroup on a pure v2 host and /sys/fs/cgroup/unified
// on a hybrid one; "memory" the v1 memory hierarchy, which only v1 and
// hybrid hosts have. It returns "" when there is none.
func CgroupHierarchy(controller string) (string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", fmt.Errorf("opening mountinfo: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// "36 35 0:30 / /sys/fs/cgroup/memory rw,relatime shared:9 - cgroup cgroup rw,memory"
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		fields, postFields := strings.Fields(pre), strings.Fields(post)
		if !ok || len(fields) < 5 || len(postFields) < 3 || fields[3] != "/" {
			continue // a bind mount of a sub-cgroup is not the hierarchy's root
		}
		switch {
		case controller == "" && postFields[0] == "cgroup2",
			controller != "" && postFields[0] == "cgroup" && slices.Contains(strings.Split(postFields[2], ","), controller):
			return unescapeMount(fields[4]), nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("reading mountinfo: %w", err)
	}
	return "", nil
}

// NewCgroup makes the cgroup at path (elements below the hierarchy's root,
// e.g. /kubepods.slice/.../cri-containerd-<id>.scope) in the hierarchy
// mounted at mount, and returns its directory. After the test it removes
// what it made, deepest first, once the processes moved there are gone; a
// parent that was there before, or that another cgroup still uses, stays.
func NewCgroup(t testing.TB, mount, path string) string {
	t.Helper()
	RequireRoot(t)
	dir := filepath.Join(mount, filepath.Clean("/"+path))
	unlock, err := LockCgroups(unix.LOCK_SH)
	if err != nil {
		t.Fatal(err)
	}
	var made []string
	for p := dir; p != mount && p != "/"; p = filepath.Dir(p) {
		if _, err := os.Stat(p); errors.Is(err, os.ErrNotExist) {
			made = append(made, p)
		}
	}
	err = os.MkdirAll(dir, 0o755)
	unlock()
	t.Cleanup(func() {
		unlock, err := LockCgroups(unix.LOCK_EX)
		if err != nil {
			t.Error(err)
			return
		}
		defer unlock()
		for _, p := range made { // deepest first
			err := rmdirRetry(p, p == dir)
			if err != nil && !errors.Is(err, unix.ENOENT) {
				if p == dir {
					t.Errorf("removing cgroup %s: %v", p, err)
				}
				return
			}
		}
	})
	if err != nil {
		t.Fatalf("creating cgroup %s: %v", dir, err)
	}
	return dir
}
