package agent

import (
	"runtime/debug"

	"github.com/execid/correlator/pkg/join"
)

// releaseBytes is how much the joiner must have let go of (and at least
// half of its peak) before the agent hands freed pages back at once.
const releaseBytes = 32 << 20

// memoryRelease returns freed pages to the OS once the joiner has let go of
// most of what it held (a burst of sessions ended): the runtime's
// scavenger would take minutes, and a node's memory limit counts RSS.
type memoryRelease struct {
	peak int
}

// observe is called with each stats snapshot; it reports whether it
// released memory.
func (m *memoryRelease) observe(st join.Stats) bool {
	held := st.ProcessBytes + st.RecordBytes
	if held > m.peak {
		m.peak = held
		return false
	}
	if m.peak-held < releaseBytes || held > m.peak/2 {
		return false
	}
	debug.FreeOSMemory()
	m.peak = held
	return true
}
