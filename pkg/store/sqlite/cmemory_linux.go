//go:build (amd64 || arm64) && !libc.membrk && !libc.memgrind

package sqlite

import (
	"sync"
	_ "unsafe" // go:linkname

	_ "modernc.org/libc" // defines the allocator linked below
	"modernc.org/memory"
)

// SQLite's malloc is modernc.org/libc's, one modernc.org/memory Allocator
// for the process behind one mutex. Since memory v1.12 that allocator
// keeps what is freed for reuse instead of unmapping it: up to 4 MiB
// resident per size class, and the newest region of every class past
// 4 MiB, until the process ends: one query that built a 32 MiB value
// left 64 MiB behind for good.
// libc exports no way to hand it back, so the store reaches the
// allocator and its mutex by name; a libc that renames them fails the
// build here, not at run time.

//go:linkname libcAllocator modernc.org/libc.allocator
var libcAllocator memory.Allocator

//go:linkname libcAllocatorMu modernc.org/libc.allocatorMu
var libcAllocatorMu sync.Mutex

// trimCMemory returns to the OS the regions SQLite's allocator keeps
// empty for reuse. Pages still holding live allocations stay. It holds
// the allocator's mutex, so every SQLite allocation waits for it: a few
// munmaps, once a minute.
func trimCMemory() error {
	libcAllocatorMu.Lock()
	defer libcAllocatorMu.Unlock()
	return libcAllocator.Trim()
}
