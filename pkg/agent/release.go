package agent

import (
	"math"
	"os"
	"runtime/debug"
	"runtime/metrics"

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

// footprintFloor is the Go memory under which the runtime's default pacing
// (GOGC=100: a heap twice its live bytes) is left alone: an agent holding
// little costs little either way, and collecting more often costs CPU.
// At 64 MiB make soak's agent (some 35 MiB live, 45 in use with its
// fragments, and 10 to 12 MiB of stacks and the runtime's own) had its
// heap's goal at or under the heap in use after a burst: the collector ran
// back to back, and the queries, which allocate, paid for it in assists.
// At 72 its live heap (about 39 MiB) put the limit above the floor, and RSS
// followed each MiB the live heap gained by five thirds of one; at 76, and
// a half past it (footprintLimit), the limit is a budget up to 44 MiB live.
const footprintFloor = 76 << 20

// footprint keeps the Go runtime's memory near what the agent holds: with
// GOGC alone a heap grows to twice its live bytes and keeps the pages, so
// 40 MiB of processes held cost 80 MiB of RSS. Past footprintFloor it sets
// the soft memory limit to the live heap and a half (and what the runtime
// holds besides its heap): the collector runs more often over a burst, and
// only when the heap is large, and the scavenger returns what the limit
// leaves over. (In BenchmarkLiveProcesses100k a half collected 40% more
// often than two thirds for about the same RSS; under the floor, where an
// agent spends its time, the part sets only where the floor ends.) It
// never raises the limit above cap (the container's, set by the command;
// 0: none).
type footprint struct {
	cap     int64
	set     int64 // the limit last set, 0: none yet
	gc      int   // the GC percent before start, -2: not changed
	samples []metrics.Sample
}

// footprintGCPercent is the agent's GOGC. The soft memory limit bounds the
// heap already (footprintFloor, or the live heap and a half), so the
// percent only paces a small heap: at 100 an agent holding 10 MiB
// collected every 10 MiB allocated, about every 2,000 execs, 12 % of its
// CPU at 300 execs/s; at 400 it collects a quarter as often and its heap
// stays under the floor. Set GOGC to choose another.
const footprintGCPercent = 400

func newFootprint(capBytes int64) *footprint {
	f := &footprint{cap: capBytes, gc: -2}
	// Read in this order by observe.
	for _, name := range []string{"/gc/heap/live:bytes", "/memory/classes/total:bytes",
		"/memory/classes/heap/released:bytes", "/memory/classes/heap/objects:bytes",
		"/memory/classes/heap/unused:bytes", "/memory/classes/heap/free:bytes"} {
		f.samples = append(f.samples, metrics.Sample{Name: name})
	}
	return f
}

// start sets the limit for the heap now and the GC percent, unless the
// GOGC environment variable chose one.
func (f *footprint) start() {
	f.observe()
	if _, set := os.LookupEnv("GOGC"); !set && f.gc == -2 {
		f.gc = debug.SetGCPercent(footprintGCPercent)
	}
}

// observe sets the limit the runtime's live heap calls for now.
func (f *footprint) observe() {
	metrics.Read(f.samples)
	var v [6]int64
	for i, s := range f.samples {
		if s.Value.Kind() == metrics.KindUint64 {
			v[i] = int64(min(s.Value.Uint64(), math.MaxInt64))
		}
	}
	live, total := v[0], v[1]
	besides := total - v[2] - v[3] - v[4] - v[5] // stacks, GC metadata, other
	f.apply(footprintLimit(live, besides, f.cap))
}

// apply sets limit unless it is within 1/16 of the one set. The floor is
// always set again: a burst that raised the limit a sixteenth past it
// would otherwise keep it raised once the burst's memory was let go (the
// way back is under a sixteenth of the raised limit), and RSS with it.
func (f *footprint) apply(limit int64) {
	if limit == f.set {
		return
	}
	d, floor := limit-f.set, min(int64(footprintFloor), footprintCap(f.cap))
	if f.set != 0 && limit != floor && d < f.set/16 && -d < f.set/16 {
		return
	}
	debug.SetMemoryLimit(limit)
	f.set = limit
}

// restore hands the limit back to cap and the GC percent back to what it
// was when the agent stops.
func (f *footprint) restore() {
	if f.gc != -2 {
		debug.SetGCPercent(f.gc)
		f.gc = -2
	}
	if f.set != 0 {
		debug.SetMemoryLimit(footprintCap(f.cap))
		f.set = 0
	}
}

// footprintLimit is the soft memory limit for a live heap of live bytes
// and besides bytes of other runtime memory, under cap.
func footprintLimit(live, besides, capBytes int64) int64 {
	return min(max(footprintFloor, live+live/2+besides), footprintCap(capBytes))
}

func footprintCap(capBytes int64) int64 {
	if capBytes <= 0 {
		return math.MaxInt64
	}
	return capBytes
}
