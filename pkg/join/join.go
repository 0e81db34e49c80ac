// Package join attributes captured processes to the kube-apiserver exec
// sessions that started them (design.md, "Join rules").
//
// The Joiner does no I/O and keeps no clock: the agent passes process events,
// exits and merged audit records in, with the time, and gets back the rows
// whose attribution changed. Because the result is a function of the events
// held rather than of their order, every interleaving can be tested.
package join

import (
	"errors"
	"fmt"
	"time"

	"github.com/execid/correlator/pkg/auditlog"
	"github.com/execid/correlator/pkg/vocab"
	"github.com/rs/zerolog"
)

// Defaults for Config.
const (
	DefaultPendingTTL      = 5 * time.Minute
	DefaultHeuristicWindow = 10 * time.Second
	DefaultClockSkew       = time.Second
	// DefaultAuditLag is kube-apiserver's --audit-webhook-batch-max-wait:
	// the longest a record waits in the apiserver before it is sent.
	DefaultAuditLag = 30 * time.Second
	// DefaultLateWindow covers the clouds' audit deliveries (minutes) and
	// a shipper's backlog after an outage (up to an hour).
	DefaultLateWindow   = time.Hour
	DefaultMaxPending   = 100_000
	DefaultMaxRecords   = 100_000
	DefaultMaxProcesses = 500_000
	// The byte bounds are estimates of the Go heap held; with the stage
	// merger and queues they keep the agent well inside the chart's 512 MiB.
	DefaultMaxRecordBytes   = 32 << 20
	DefaultMaxDeniedRecords = 4096
	DefaultMaxProcessBytes  = 160 << 20
)

// ErrInvalidConfig marks a Config that Validate refused.
var ErrInvalidConfig = errors.New("invalid join config")

// Config bounds the joiner's time windows and memory.
type Config struct {
	// PendingTTL is how long a process waits for its audit record before it
	// is flagged no_audit_record, and how long exited processes and idle
	// records are kept for late arrivals (one its own record answered
	// leaves AnsweredLinger after its exit).
	PendingTTL time.Duration `json:"pendingTTL" yaml:"pendingTTL"`
	// HeuristicWindow is how far from requestReceived, either way, an
	// ID-less exec root may start and still be matched to the request.
	HeuristicWindow time.Duration `json:"heuristicWindow" yaml:"heuristicWindow"`
	// ClockSkew is how far the node's clock may run behind the
	// apiserver's: a verified root may start up to this long before its
	// request's requestReceived (or after its end) and still be paired with
	// it. Larger makes reused IDs ambiguous more often, never wrong.
	ClockSkew time.Duration `json:"clockSkew" yaml:"clockSkew"`
	// AuditLag is how late an exec request's record may reach this node
	// after the request was received (the webhook's batching, a shipper's
	// delay). An ID-less root's heuristic answer waits HeuristicWindow +
	// AuditLag past its start, so that every record that could fit it is
	// weighed: no answer names one user while a second fitting request is
	// still on its way. Shorter answers sooner; a record later than this
	// still re-decides the root, but after an answer was given.
	AuditLag time.Duration `json:"auditLag" yaml:"auditLag"`
	// LateWindow is how long after its start an exited process of an exec
	// session (it carries an ID, is an ID-less exec root, or descends from
	// one) is kept past the pending TTL, so that a record later than the
	// TTL still attributes it, on the same data it would have met in time
	// (late.go). 0 keeps nothing past the TTL. The process bounds still
	// apply; what leaves unanswered is counted (Stats.LateForgotten).
	LateWindow   time.Duration `json:"lateWindow" yaml:"lateWindow"`
	MaxPending   int           `json:"maxPending" yaml:"maxPending"`
	MaxRecords   int           `json:"maxRecords" yaml:"maxRecords"`
	MaxProcesses int           `json:"maxProcesses" yaml:"maxProcesses"`
	// MaxRecordBytes bounds the estimated heap of the records held, shared
	// strings included; MaxProcessBytes that of the processes.
	MaxRecordBytes  int `json:"maxRecordBytes" yaml:"maxRecordBytes"`
	MaxProcessBytes int `json:"maxProcessBytes" yaml:"maxProcessBytes"`
	// MaxDeniedRecords bounds the records whose every request was refused
	// or failed. They attribute nothing and are read only when a process
	// replays their ID; anyone authenticated can make them.
	MaxDeniedRecords int `json:"maxDeniedRecords" yaml:"maxDeniedRecords"`
	// BridgeCaptured: the kernel captures the exec bridge's key
	// (vocab.BridgeKey), so a request the bridge annotated has its root
	// carry the ID, and the heuristic never offers it to an ID-less root.
	BridgeCaptured bool `json:"bridgeCaptured" yaml:"bridgeCaptured"`
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{
		PendingTTL:      DefaultPendingTTL,
		HeuristicWindow: DefaultHeuristicWindow,
		ClockSkew:       DefaultClockSkew,
		AuditLag:        DefaultAuditLag,
		LateWindow:      DefaultLateWindow,
		MaxPending:      DefaultMaxPending,
		MaxRecords:      DefaultMaxRecords,
		MaxProcesses:    DefaultMaxProcesses,

		MaxRecordBytes:   DefaultMaxRecordBytes,
		MaxProcessBytes:  DefaultMaxProcessBytes,
		MaxDeniedRecords: DefaultMaxDeniedRecords,
	}
}

// Validate reports the first bad field.
func (c Config) Validate() error {
	switch {
	case c.PendingTTL <= 0:
		return fmt.Errorf("validating pendingTTL %v: must be positive: %w", c.PendingTTL, ErrInvalidConfig)
	case c.HeuristicWindow < 0:
		return fmt.Errorf("validating heuristicWindow %v: must not be negative: %w", c.HeuristicWindow, ErrInvalidConfig)
	case c.ClockSkew < 0:
		return fmt.Errorf("validating clockSkew %v: must not be negative: %w", c.ClockSkew, ErrInvalidConfig)
	case c.AuditLag < 0:
		return fmt.Errorf("validating auditLag %v: must not be negative: %w", c.AuditLag, ErrInvalidConfig)
	case c.LateWindow < 0:
		return fmt.Errorf("validating lateWindow %v: must not be negative: %w", c.LateWindow, ErrInvalidConfig)
	case c.MaxPending <= 0, c.MaxRecords <= 0, c.MaxProcesses <= 0:
		return fmt.Errorf("validating caps (pending %d, records %d, processes %d): must be positive: %w",
			c.MaxPending, c.MaxRecords, c.MaxProcesses, ErrInvalidConfig)
	case c.MaxRecordBytes <= 0, c.MaxProcessBytes <= 0, c.MaxDeniedRecords <= 0:
		return fmt.Errorf("validating caps (record bytes %d, process bytes %d, denied records %d): must be positive: %w",
			c.MaxRecordBytes, c.MaxProcessBytes, c.MaxDeniedRecords, ErrInvalidConfig)
	}
	return nil
}

// Joiner holds processes and records and keeps their attribution current.
// It is not safe for concurrent use: the agent feeds it from one goroutine.
type Joiner struct {
	cfg Config
	log zerolog.Logger

	procs ptable
	deps  map[string]*pset // processID -> processes whose result reads it
	// recsVersion counts changes to recs (RecordsVersion).
	recsVersion uint64
	ids         map[string]*idState             // captured audit ID -> processes carrying it
	spoProcs    map[string]*pset                // SPO value -> processes carrying it
	recs        map[string]*recSet              // audit ID -> its request(s)
	spo         map[string][]string             // SPO value -> audit IDs annotated with it
	recsPod     map[slotKey]map[string]struct{} // namespace/pod and requestReceived's slot -> audit IDs
	rootsPod    map[string]map[string]struct{}  // namespace/pod -> ID-less exec roots held
	rootsSlot   map[slotKey]map[string]struct{} // the same by pod and start's slot
	roots       map[string]map[string]*rootInfo // audit ID -> its verified roots, by processID
	pairs       map[string]*pairing             // audit ID -> its pairing, made on demand
	rootsEnded  map[string]struct{}             // IDs in roots whose requests had all ended when their record left
	heldPod     map[string]int                  // pod and session key -> settled ID-less roots with it as only candidate
	pending     map[string]int64                // waiting processes -> their TTL's end at the latest (qtime)
	orphans     map[string]Exit                 // exits that came before their exec

	procq       procQueue // held processes, oldest first: evictHead and pendHead
	exitq, recq queue
	doneq       queue     // exits, for answered processes to leave at AnsweredLinger (late.go)
	orphanq     queue     // orphans by exit time, to leave at OrphanLinger
	rootq       queue     // IDs in j.roots, oldest first
	windowq     deadlines // ID-less roots waiting for their window to close
	lateq       deadlines // exited processes kept for a late record, by when they go
	// arriving is set while a record (or a stored root) is being taken
	// in: a process it attributes after its wait ended is flagged late.
	arriving  bool
	before    map[string]*sharedResult // results as the arriving record found them
	now       time.Time                // the latest time the joiner was given
	rootCount int                      // roots in j.roots
	deniedq   queue                    // refused records, oldest first
	seq       uint64
	stats     Stats

	intern    *interner
	shares    *shares  // what held processes repeat, charged to processes
	results   *results // the processes' results, likewise
	images    *images  // the processes' images, likewise
	recBytes  int      // estimated heap of held records, less what intern holds
	procBytes int      // estimated heap of held processes, less what they share
	denied    int      // held records whose every request was refused

	peaks [10]int // high-water marks of the maps shrinkMaps tends

	work   []string
	queued map[string]struct{}
	// dirtyProcs holds the processes changed since the last flush, true
	// where more than the exit changed.
	dirtyProcs map[string]bool
	dirtySess  map[string]struct{}
	held       bool     // Hold: flush waits for Release
	heldOut    []Update // what removeProc took from a held flush
}

// New returns an empty Joiner.
func New(cfg Config, log zerolog.Logger) (*Joiner, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Joiner{
		cfg:        cfg,
		log:        log.With().Str("component", "join").Logger(),
		procs:      newPtable(),
		deps:       map[string]*pset{},
		ids:        map[string]*idState{},
		spoProcs:   map[string]*pset{},
		recs:       map[string]*recSet{},
		spo:        map[string][]string{},
		recsPod:    map[slotKey]map[string]struct{}{},
		rootsPod:   map[string]map[string]struct{}{},
		rootsSlot:  map[slotKey]map[string]struct{}{},
		roots:      map[string]map[string]*rootInfo{},
		pairs:      map[string]*pairing{},
		rootsEnded: map[string]struct{}{},
		heldPod:    map[string]int{},
		pending:    map[string]int64{},
		orphans:    map[string]Exit{},
		intern:     newInterner(),
		shares:     newShares(),
		results:    newResults(),
		images:     newImages(),
		queued:     map[string]struct{}{},
		dirtyProcs: map[string]bool{},
		dirtySess:  map[string]struct{}{},
	}, nil
}

// AddProcess adds one exec. A second exec of the same process (same
// processID) replaces its image; the audit ID is the latest exec's.
func (j *Joiner) AddProcess(now time.Time, in Process) []Update {
	if in.ProcessID == "" {
		return nil
	}
	j.stats.ProcessesAdded++
	p := j.procs.get(in.ProcessID)
	if p == nil {
		j.seq++
		p = &proc{seq: j.seq, res: noResult}
		j.own(p, &in)
		j.procs.put(p)
		j.procq.push(in.ProcessID, j.seq, now)
		if e, ok := j.orphans[in.ProcessID]; ok {
			delete(j.orphans, in.ProcessID)
			p.setExit(e)
			j.pushExit(p, e)
		}
	} else {
		j.unindex(p)
		j.setRoot(p, "") // the pod key may change; settle files p again
		j.merge(p, &in)
	}
	j.sizeProc(p)
	j.index(p)
	j.dirtyProcs[p.in.ProcessID] = true // the row is new or changed
	j.enqueue(p.in.ProcessID)
	// Children seen first may stop being exec roots now their parent is known.
	for d := range j.deps[p.in.ProcessID].all() {
		j.enqueue(d.in.ProcessID)
	}
	j.advance(now)
	j.settle()
	j.evictProcesses()
	j.compactQueues()
	return j.flush()
}

// AddExit records a process exit.
func (j *Joiner) AddExit(now time.Time, e Exit) []Update {
	j.stats.ExitsAdded++
	p := j.procs.get(e.ProcessID)
	if p == nil {
		if len(j.orphans) >= j.cfg.MaxPending {
			j.stats.EvictedExits++
			return nil
		}
		j.orphans[e.ProcessID] = e
		j.orphanq.push(e.ProcessID, 0, e.Time)
		return nil
	}
	if p.setExit(e) {
		j.sizeProc(p)
		j.pushExit(p, e)
		if _, dirty := j.dirtyProcs[e.ProcessID]; !dirty {
			j.dirtyProcs[e.ProcessID] = false // the exit alone, so far
		}
	}
	return j.flush()
}

// AddRecord adds or updates a merged exec record. The same request may come
// again with more stages; an older snapshot (a strict subset of the stages
// held) is ignored. A different request under the same ID is a conflict.
//
// A record without an audit ID is filed under its SyntheticAuditID and
// flagged missing_audit_id: it is a candidate for the heuristic, never
// joined by ID.
func (j *Joiner) AddRecord(now time.Time, rec auditlog.ExecRecord) []Update {
	if rec.AuditID == "" {
		rec.AuditID = auditlog.SyntheticRecordID(&rec)
		rec.Flags = withFlag(rec.Flags, vocab.FlagMissingAuditID)
	}
	j.stats.RecordsAdded++
	if !j.storeRecord(now, &rec) {
		j.stats.StaleRecords++
		return nil
	}
	j.dirtySess[rec.AuditID] = struct{}{}
	j.enqueueRecord(rec.AuditID)
	j.advance(now)
	j.arriving = true
	j.settle()
	j.arriving = false
	// Emit before evicting: a record shed at once is still stored.
	out := j.flush()
	j.evictRecords()
	j.compactQueues()
	return out
}

// Stats returns the counters.
func (j *Joiner) Stats() Stats {
	s := j.stats
	s.Processes, s.Pending, s.Records = j.procs.len(), len(j.pending), len(j.recs)
	s.RecordBytes, s.ProcessBytes, s.DeniedRecords = j.recBytes+j.intern.bytes, j.procsBytes(), j.denied
	return s
}

// Process returns the current state of one process, if held.
func (j *Joiner) Process(processID string) (Process, bool) {
	p := j.procs.get(processID)
	if p == nil {
		return Process{}, false
	}
	return j.output(p), true
}

// Session returns the current state of one session, by audit ID or by the
// session key of a request that reused one, if its record is held.
func (j *Joiner) Session(key string) (Session, bool) {
	rs := j.recOf(key)
	if rs == nil {
		return Session{}, false
	}
	for i, k := range rs.keys() {
		if k == key {
			return rs.output(i, k), true
		}
	}
	return Session{}, false
}

// procsBytes estimates the heap the processes hold, shared values included.
func (j *Joiner) procsBytes() int {
	return j.procBytes + j.shares.bytes + j.results.bytes + j.images.bytes
}

// enqueue schedules a process for re-resolution in the current settle.
func (j *Joiner) enqueue(id string) {
	if _, ok := j.queued[id]; ok {
		return
	}
	j.queued[id] = struct{}{}
	j.work = append(j.work, id)
}

// settle re-resolves queued processes until nothing changes, following
// dependents (children, and descendants of unverified roots).
func (j *Joiner) settle() {
	// Results only copy along acyclic lineage, but guard against bad input.
	budget := 4*j.procs.len() + 1024
	defer func(start int) {
		if start-budget > bigMap {
			// A Go map keeps its buckets when emptied: let a big one go.
			j.queued, j.work = map[string]struct{}{}, nil
		}
	}(budget)
	// The queue is read by index and emptied at the end, not sliced from
	// its front: that kept shrinking its capacity, and every settle
	// allocated it again.
	next := 0
	for ; next < len(j.work) && budget > 0; next++ {
		budget--
		id := j.work[next]
		delete(j.queued, id)
		p := j.procs.get(id)
		if p == nil {
			continue
		}
		res := j.resolve(p)
		j.track(p, res)
		if res.equal(&p.res.result) {
			continue
		}
		old := p.res
		if j.arriving {
			j.seenBefore(p, old)
		}
		p.res = j.results.acquire(&res)
		j.dirtyProcs[id] = true
		j.moveSession(p, &old.result, &res)
		j.results.release(old)
		for d := range j.deps[id].all() {
			j.enqueue(d.in.ProcessID)
		}
	}
	if left := len(j.work) - next; left > 0 {
		j.log.Warn().Int("left", left).Msg("settling attribution hit its budget")
		clear(j.queued)
	}
	clear(j.work) // drop the IDs it held
	j.work = j.work[:0]
	j.noteLate()
}

// flush turns everything changed since the last call into Updates.
func (j *Joiner) flush() []Update {
	if j.held || len(j.dirtyProcs) == 0 && len(j.dirtySess) == 0 {
		return nil
	}
	out := make([]Update, 0, len(j.dirtyProcs)+len(j.dirtySess))
	procs := make([]Process, 0, len(j.dirtyProcs)) // one allocation for the rows
	for id := range j.dirtySess {
		if rs := j.recs[id]; rs != nil {
			for _, s := range rs.outputs() {
				out = append(out, Update{Session: &s})
			}
		}
	}
	for id, more := range j.dirtyProcs {
		if p := j.procs.get(id); p != nil {
			procs = append(procs, j.output(p))
			// AddProcess marks more, so a process's first row is whole and
			// ExitOnly always follows a row handed out.
			out = append(out, Update{Process: &procs[len(procs)-1], ExitOnly: !more})
		}
	}
	j.dirtyProcs, j.dirtySess = emptied(j.dirtyProcs), emptied(j.dirtySess)
	return out
}
