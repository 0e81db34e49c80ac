package auditlog

import (
	"slices"
	"time"

	"github.com/execid/correlator/pkg/vocab"
)

// DefaultMaxRecords bounds the Merger's memory.
const DefaultMaxRecords = 100_000

// MergerConfig configures a Merger.
type MergerConfig struct {
	// MaxRecords caps the records held; the oldest are evicted first.
	// <= 0 means DefaultMaxRecords.
	MaxRecords int
	// MaxBytes caps the records' estimated heap as measured by Size (one
	// request can carry a megabyte command in its URI); the oldest are
	// evicted first. 0, or no Size, means no byte bound.
	MaxBytes int
	Size     func(*ExecRecord) int
	// DoneIdle and OpenIdle let a record go once no stage of it has come
	// for that long, by the clock Expire is called with: DoneIdle once its
	// ending stage is in (only a redelivery can follow), OpenIdle while
	// the request is open (a session hours long sends ResponseComplete as
	// it ends). A stage that comes after is filed alone, and a consumer
	// that still holds the request folds it in (Fold). 0: no age bound.
	DoneIdle, OpenIdle time.Duration
}

// MergerStats counts what the Merger did.
type MergerStats struct {
	Events     int64 // events accepted (stages applied)
	Duplicates int64 // exact redeliveries of (auditID, request, stage) dropped
	Conflicts  int64 // requests that reused an auditID held by another request
	Ignored    int64 // non-streaming events passed in
	Evicted    int64 // records dropped to respect MaxRecords or MaxBytes
	Expired    int64 // records let go by DoneIdle or OpenIdle
	IDsCut     int64 // events whose auditID was over MaxAuditIDBytes (BoundAuditID)
	Records    int   // records held now
	Bytes      int   // estimated heap of the records held (with Size)
}

// AddResult says what one Add did. Updated holds copies of every record the
// event changed (two when it revealed an auditID conflict); Evicted the
// records pushed out to make room.
type AddResult struct {
	Updated   []ExecRecord
	Evicted   []ExecRecord
	Duplicate bool
}

// Merger folds the stages of streaming requests into ExecRecords keyed by
// auditID. It does no I/O and keeps no clock, so the joiner can drive it
// with any interleaving. Not safe for concurrent use.
type Merger struct {
	max   int
	cfg   MergerConfig
	bytes int
	byID  map[string][]*entry
	order []*entry // insertion order, for eviction; head is order[head]
	head  int
	stats MergerStats
	// fresh lists the records a stage reached since the last Expire, which
	// stamps them; sweepAt is when Expire next walks the records.
	fresh   []*entry
	sweepAt time.Time
	gone    gone // the requests let go (mergegone.go)
}

type entry struct {
	rec    ExecRecord
	key    requestKey
	stages map[string]bool
	ranks  ranks
	size   int // cfg.Size of rec, as last measured
	// last is the first Expire after its latest stage; zero until then,
	// while the entry is listed in fresh.
	last  time.Time
	fresh bool
}

// requestKey is what every stage of one request shares; two events with one
// auditID but different keys are different requests.
type requestKey struct {
	uri, verb, user, namespace, name, subresource string
	// missing keeps an ID-less request apart from one whose client chose
	// its synthetic key as Audit-ID; cut one whose ID was bounded from one
	// whose client chose the bounded form.
	missing, cut bool
}

func keyOf(ev *Event) requestKey {
	k := requestKey{uri: ev.RequestURI, verb: ev.Verb, user: ev.User.Username, missing: ev.missingID, cut: ev.idCut}
	if ev.ObjectRef != nil {
		k.namespace, k.name, k.subresource = ev.ObjectRef.Namespace, ev.ObjectRef.Name, ev.ObjectRef.Subresource
	}
	return k
}

// compatible reports whether an event (as the record r it would start)
// may be a stage of e's request: what one of them leaves unknown (a body
// only later stages log, the code RequestReceived lacks) matches anything,
// but two known values must agree. Codes agree when equal or both
// successes (ResponseStarted's 101 may end in 200, "connection closed
// early"); a Panic's 500 follows any code.
func (e *entry) compatible(r *ExecRecord, stage string, code int32) bool {
	h := &e.rec
	switch {
	case len(h.Command) > 0 && len(r.Command) > 0 && !slices.Equal(h.Command, r.Command),
		h.Container != "" && r.Container != "" && h.Container != r.Container,
		len(h.Ports) > 0 && len(r.Ports) > 0 && !slices.Equal(h.Ports, r.Ports),
		h.Stdin != nil && r.Stdin != nil && *h.Stdin != *r.Stdin,
		h.TTY != nil && r.TTY != nil && *h.TTY != *r.TTY:
		return false
	}
	return h.Code == 0 || code == 0 || h.Code == code || (h.Code < 400 && code < 400) ||
		stage == StagePanic || e.ranks.code == stageRank(StagePanic)
}

// find returns the entry under id whose request the event belongs to.
func (m *Merger) find(id string, key requestKey, r *ExecRecord, stage string, code int32) *entry {
	for _, c := range m.byID[id] {
		if c.key == key && c.compatible(r, stage, code) {
			return c
		}
	}
	return nil
}

// NewMerger returns an empty Merger.
func NewMerger(cfg MergerConfig) *Merger {
	if cfg.MaxRecords <= 0 {
		cfg.MaxRecords = DefaultMaxRecords
	}
	return &Merger{max: cfg.MaxRecords, cfg: cfg, byID: map[string][]*entry{}}
}

// Add applies one event. Non-streaming events are ignored. An auditID over
// MaxAuditIDBytes is bounded (BoundAuditID) and flagged audit_id_truncated.
// An event without an auditID is filed under its synthetic key (missingKey,
// a function of the event alone) and flagged missing_audit_id: ID-less
// requests that differ in what every stage logs are kept apart, and the
// key does not depend on what else the Merger read or in which order. Two
// events under one auditID or one synthetic key are stages of one request
// only when what they asked agrees; otherwise both requests are kept,
// flagged audit_id_conflict. A request under an ID whose other request was
// let go (mergegone.go) is flagged too.
func (m *Merger) Add(ev Event) AddResult {
	var res AddResult
	if !IsStreaming(&ev) {
		m.stats.Ignored++
		return res
	}
	if boundEventID(&ev) {
		m.stats.IDsCut++
	}
	var code int32
	if ev.ResponseStatus != nil {
		code = ev.ResponseStatus.Code
	}
	rec := newRecord(&ev)
	if ev.AuditID == "" {
		ev.AuditID, ev.missingID = missingKey(&ev), true
		rec.AuditID = ev.AuditID
		rec.addFlag(vocab.FlagMissingAuditID)
	}
	e := m.find(ev.AuditID, keyOf(&ev), rec, ev.Stage, code)
	if e != nil && e.stages[ev.Stage] {
		m.stats.Duplicates++
		res.Duplicate = true
		return res
	}
	if e == nil {
		entries := m.byID[ev.AuditID]
		e = &entry{rec: *rec, key: keyOf(&ev), stages: map[string]bool{}, ranks: ranks{code: -1, annotations: -1}}
		if len(entries) == 0 && m.usedByOther(ev.AuditID, e.key) {
			// The other request was let go: this one is flagged, as it
			// would have been beside it.
			m.stats.Conflicts++
			e.rec.addFlag(vocab.FlagAuditIDConflict)
		}
		if len(entries) > 0 {
			m.stats.Conflicts++
			e.rec.addFlag(vocab.FlagAuditIDConflict)
			for _, other := range entries {
				if !other.rec.HasFlag(vocab.FlagAuditIDConflict) {
					other.rec.addFlag(vocab.FlagAuditIDConflict)
					res.Updated = append(res.Updated, other.rec.Clone())
				}
			}
		}
		m.byID[ev.AuditID] = append(entries, e)
		m.order = append(m.order, e)
	}
	e.stages[ev.Stage] = true
	e.rec.apply(&ev, &e.ranks)
	if m.cfg.Size != nil {
		n := m.cfg.Size(&e.rec)
		m.bytes += n - e.size
		e.size = n
	}
	m.stats.Events++
	m.touch(e)
	res.Updated = append(res.Updated, e.rec.Clone())
	res.Evicted = m.evict()
	return res
}

// over reports whether the records held exceed a cap.
func (m *Merger) over() bool {
	n := len(m.order) - m.head
	return n > m.max || (m.cfg.MaxBytes > 0 && m.bytes > m.cfg.MaxBytes && n > 0)
}

// evict drops the oldest records beyond the caps.
func (m *Merger) evict() []ExecRecord {
	var out []ExecRecord
	for m.over() {
		old := m.order[m.head]
		m.order[m.head] = nil
		m.head++
		m.stats.Evicted++
		m.bytes -= old.size
		out = append(out, old.rec.Clone())
		m.unfile(old)
		m.bury(old)
	}
	// Compact the queue once the dead prefix dominates.
	if m.head > 1024 && m.head > len(m.order)/2 {
		m.order = append([]*entry(nil), m.order[m.head:]...)
		m.head = 0
	}
	return out
}

// unfile forgets e under its ID.
func (m *Merger) unfile(e *entry) {
	list := m.byID[e.rec.AuditID]
	for i, c := range list {
		if c == e {
			list = append(list[:i], list[i+1:]...)
			break
		}
	}
	if len(list) == 0 {
		delete(m.byID, e.rec.AuditID)
	} else {
		m.byID[e.rec.AuditID] = list
	}
}

// Lookup returns copies of the records held for auditID (more than one when
// the ID is in conflict).
func (m *Merger) Lookup(auditID string) []ExecRecord {
	var out []ExecRecord
	for _, e := range m.byID[auditID] {
		out = append(out, e.rec.Clone())
	}
	return out
}

// Records returns copies of every record held, oldest first.
func (m *Merger) Records() []ExecRecord {
	out := make([]ExecRecord, 0, len(m.order)-m.head)
	for _, e := range m.order[m.head:] {
		out = append(out, e.rec.Clone())
	}
	return out
}

// Stats returns the counters.
func (m *Merger) Stats() MergerStats {
	s := m.stats
	s.Records = len(m.order) - m.head
	s.Bytes = m.bytes
	return s
}
