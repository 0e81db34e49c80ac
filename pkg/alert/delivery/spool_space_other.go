//go:build !linux

package delivery

import (
	"errors"
	"syscall"
)

// freeBytes is unknown here: the spool keeps no reserve and relies on
// ENOSPC alone.
func freeBytes(string) (int64, bool) { return 0, false }

// isNoSpace reports a write that failed for lack of space.
func isNoSpace(err error) bool { return errors.Is(err, syscall.ENOSPC) }
