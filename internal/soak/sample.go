// Package soak drives the real agent for a long time under a busy node's
// load (exec sessions through the runtime, their audit records by webhook,
// queries, retention, upgrades, a kill -9, a full disk) and records what a
// slow leak would show: memory, CPU per exec, the store's size, files,
// goroutines, drops, query latency, acknowledged records lost.
package soak

import "time"

// Sample is one reading of the agent and its load, taken every few
// seconds. Counters marked cumulative run over the whole soak, across
// agent restarts; the others are the reading's or the interval's since
// the previous sample.
type Sample struct {
	At      time.Time
	Elapsed time.Duration // since the soak's start
	Agent   int           // which agent process, 1 for the first; 0 when none ran
	Phase   string        // what the soak was doing: "", "disk-full", "restarting"

	RSSBytes  int64 // the agent's resident set (VmRSS): with the binary's pages and the mapped ring buffer
	AnonBytes int64 // RssAnon: the agent's own memory (Go's heap and stacks, SQLite's), what a leak grows
	HeapBytes int64 // go_memstats_heap_inuse_bytes
	// HeapKeptBytes is the Go heap's resident pages: in use, and idle
	// but not yet given back (heap_inuse + heap_idle - heap_released).
	// The runtime keeps what a burst touched while this is under about
	// its goal and a quarter (1.24 and 1.28 measured); RssAnon less it
	// is SQLite's, the stacks' and the runtime's own.
	HeapKeptBytes int64
	NextGCBytes   int64 // go_memstats_next_gc_bytes: the heap's goal
	Goroutines    int   // go_goroutines
	OpenFiles     int   // entries in /proc/PID/fd

	ExecRate     float64 // execs the agent saw per second over the interval
	CPUPerExecUS float64 // the agent's user+system CPU over the interval per exec seen, µs; 0 when none
	StoreBytes   int64   // the SQLite database file
	WALBytes     int64   // its write-ahead log

	RingDrops    int64 // cumulative: correlator_capture_ringbuf_drops_total
	Evictions    int64 // cumulative: correlator_join_evicted_total, every kind
	StoreDropped int64 // cumulative: correlator_store_rows_total{outcome="dropped"}

	Queries    int     // REST queries answered over the interval
	QueryP99MS float64 // their 99th percentile latency, ms; 0 when none
	QueryFails int     // cumulative: queries that failed while an agent was up

	Acked    int64 // cumulative: exec requests whose audit records the webhook acknowledged
	Verified int64 // cumulative: acknowledged requests found stored, with their user
	Lost     int64 // cumulative: acknowledged requests looked for and not found

	// NodeBusy and NodeSteal are the shares of the node's CPU time, all
	// its CPUs together, that ran something (the load, the soak, the
	// agent, the kernel) and that the hypervisor took, over the interval
	// since the previous sample (/proc/stat); 0 for the first. They tell
	// a busier node from a change in the agent between two runs.
	NodeBusy  float64
	NodeSteal float64
}

// Event is something the soak did to the agent or its node, drawn as a
// marker on every panel.
type Event struct {
	At      time.Time
	Elapsed time.Duration
	What    string // "upgrade", "kill -9", "disk full", "disk freed"
}

// Query is one responder query the soak timed from its timer process.
type Query struct {
	At      time.Time
	Elapsed time.Duration // since the soak's start
	Kind    string        // "who", "sessions by user", "session tree", "processes by command", controlKind
	Took    time.Duration // from the request's write to the body's last byte, at the client
	// FirstByte is from the request's write to the response's first byte:
	// the agent writes its answer once it is encoded whole, so what
	// follows is the body's passage and its last chunk.
	FirstByte time.Duration
	// TimerWaited is how long the timer's threads waited for a CPU
	// within Took (timerwait.go); unknownWait where it could not read it.
	TimerWaited time.Duration
	// AgentWaited is how long the agent's threads, all of them, waited
	// for a CPU while the soak waited for the timer's answer: the query's
	// threads' wait and others'; unknownWait where it could not be read
	// (an agent replaced meanwhile, or none).
	AgentWaited time.Duration
	// AgentRan is how long the agent's threads, all of them, ran on a CPU
	// over the same span: the query's work and the rest the agent did
	// meanwhile; unknownWait where AgentWaited is.
	AgentRan time.Duration
}

// nodeRead reports whether the sample read the node's CPU times: a
// running node is never 0 busy and 0 stolen over an interval.
func (s Sample) nodeRead() bool { return s.NodeBusy > 0 || s.NodeSteal > 0 }
