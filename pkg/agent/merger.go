package agent

import (
	"github.com/execid/correlator/pkg/auditlog"
	"github.com/execid/correlator/pkg/join"
)

// stageMerger is the audit stage merger with a bound on its estimated heap
// as well as on its count: auditlog.Merger bounds only the number of
// requests, and one request can carry a command in a megabyte URI. Past the
// byte bound it starts over. That loses only merging state: every stage is
// already in the store, the joiner keeps the stages it holds when a later
// one comes alone, and redeliveries stay idempotent in the store.
type stageMerger struct {
	cfg      auditlog.MergerConfig
	maxBytes int
	m        *auditlog.Merger
	sizes    map[string]int // audit ID -> estimated bytes of its requests held
	bytes    int
	shed     int64 // records let go by earlier mergers: evicted or started over
}

func newStageMerger(maxRecords, maxBytes int) *stageMerger {
	cfg := auditlog.MergerConfig{MaxRecords: maxRecords}
	return &stageMerger{cfg: cfg, maxBytes: maxBytes, m: auditlog.NewMerger(cfg), sizes: map[string]int{}}
}

// add merges one stage, keeping the byte count in step with what the
// merger holds.
func (s *stageMerger) add(ev auditlog.Event) auditlog.AddResult {
	res := s.m.Add(ev)
	for i := range res.Evicted {
		s.resize(&res.Evicted[i], 0)
	}
	for i := range res.Updated {
		s.resize(&res.Updated[i], join.RecordBytes(&res.Updated[i]))
	}
	if s.bytes > s.maxBytes {
		st := s.m.Stats()
		s.shed += st.Evicted + int64(st.Records)
		s.m = auditlog.NewMerger(s.cfg)
		clear(s.sizes)
		s.bytes = 0
	}
	return res
}

// resize sets the bytes held under r's audit ID to n, or, when requests
// share the ID, to what the merger holds for all of them.
func (s *stageMerger) resize(r *auditlog.ExecRecord, n int) {
	if r.HasFlag(auditlog.FlagAuditIDConflict) {
		n = 0
		for _, o := range s.m.Lookup(r.AuditID) {
			n += join.RecordBytes(&o)
		}
	}
	s.bytes += n - s.sizes[r.AuditID]
	if n == 0 {
		delete(s.sizes, r.AuditID)
	} else {
		s.sizes[r.AuditID] = n
	}
}

// evicted counts the records the merger let go of, over its restarts.
func (s *stageMerger) evicted() int64 { return s.shed + s.m.Stats().Evicted }
