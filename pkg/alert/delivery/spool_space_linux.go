package delivery

import (
	"errors"

	"golang.org/x/sys/unix"
)

// freeBytes is the space an unprivileged writer may still use on dir's
// filesystem; ok is false when it cannot be read.
func freeBytes(dir string) (free int64, ok bool) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, false
	}
	return int64(st.Bavail) * int64(st.Bsize), true
}

// isNoSpace reports a write that failed for lack of space or quota.
func isNoSpace(err error) bool {
	return errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT)
}
