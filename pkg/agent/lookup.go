package agent

import (
	"context"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/execid/correlator/pkg/auditlog"
	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/store"
)

// lookupState asks an audit lookup (Elasticsearch) for the records of IDs
// this node has not seen: a node that never sees the audit log still
// attributes its processes.
type lookupState struct {
	l        auditlog.Lookup
	workers  int
	asked    *lru.Cache[string, struct{}]
	queue    chan string
	results  chan lookedUp
	requests *prometheus.CounterVec
	// due holds the IDs wanted, in order, until Config.LookupDelay after
	// they were first wanted (at most maxLookupsDue); dueSet the same IDs.
	// Only an ID then asked for joins asked.
	due    []dueLookup
	dueSet map[string]struct{}
}

// dueLookup is an ID to look up from at, unless its record came first.
type dueLookup struct {
	id string
	at time.Time
}

// maxLookupsDue bounds the IDs waiting out the lookup delay: a pod can
// claim any ID it likes, as many as it likes.
const maxLookupsDue = 4096

// lookedUp is one lookup's answer: the ID's records and, from a lookup that
// keeps them (RootLookup), the verified roots stored under it.
type lookedUp struct {
	id    string
	recs  []auditlog.ExecRecord
	roots []join.Process
}

// RootLookup is a lookup that also returns the processes stored under an
// audit ID (the agent's own store): after a restart the joiner learns
// again which verified roots hold the ID's requests (one request, one
// root), so a root that reused the ID before the restart is not taken for
// the first.
type RootLookup interface {
	LookupRoots(ctx context.Context, auditID string) ([]join.Process, error)
}

// WithAuditLookup makes the agent ask l for the records of the IDs its
// processes carry when no record for them has arrived. Each ID is asked
// once while it is among the last 65,536 asked; workers lookups run at
// once, and the lookup itself rate-limits and caches.
func WithAuditLookup(l auditlog.Lookup, workers int) Option {
	return func(a *Agent) {
		if l == nil {
			return
		}
		asked, _ := lru.New[string, struct{}](65536)
		a.lookup = &lookupState{l: l, workers: max(workers, 1), asked: asked, dueSet: map[string]struct{}{},
			queue: make(chan string, 1024), results: make(chan lookedUp, 64),
			requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "correlator_agent_audit_lookups_total",
				Help: "Audit record lookups the agent asked for, by outcome (found, none, error, skipped)."}, []string{"outcome"})}
		for _, o := range []string{"found", "none", "error", "skipped"} {
			a.lookup.requests.WithLabelValues(o) // exported at zero: a skip is loss
		}
	}
}

// wantLookups queues a lookup for every unattributed process whose ID has
// no record in the joiner, to be asked Config.LookupDelay later unless the
// record comes by then (lookupsDue).
func (a *Agent) wantLookups(now time.Time, b *store.Batch) {
	if a.lookup == nil {
		return
	}
	for p := range b.AllProcesses() {
		id := p.ClaimedAuditID
		if p.AuditID != "" || id == "" || a.lookup.asked.Contains(id) {
			continue
		}
		if _, waiting := a.lookup.dueSet[id]; waiting {
			continue
		}
		if _, ok := a.joiner.Session(id); ok {
			continue // refused or mismatched, not missing
		}
		if a.cfg.LookupDelay <= 0 {
			a.lookup.ask(id)
			continue
		}
		if len(a.lookup.due) >= maxLookupsDue {
			a.lookup.requests.WithLabelValues("skipped").Inc() // wanted again on the next update
			continue
		}
		a.lookup.dueSet[id] = struct{}{}
		a.lookup.due = append(a.lookup.due, dueLookup{id: id, at: now.Add(a.cfg.LookupDelay)})
	}
}

// lookupsDue asks for the IDs whose delay is over and whose record has
// still not come. Records come as their sessions run or end, through the
// sources: asking at once cost a store read for every exec session (the
// soak's agent: five a second, each answered "none"), and kept the ID
// among those asked, so a lookup made before the record reached
// Elasticsearch was never made again.
func (a *Agent) lookupsDue(now time.Time) {
	if a.lookup == nil {
		return
	}
	n := 0
	for _, d := range a.lookup.due {
		if d.at.After(now) {
			break
		}
		n++
		delete(a.lookup.dueSet, d.id)
		if _, ok := a.joiner.Session(d.id); ok {
			continue // it came, or was refused: not missing
		}
		a.lookup.ask(d.id)
	}
	a.lookup.due = append(a.lookup.due[:0], a.lookup.due[n:]...)
}

// ask queues a lookup of id; a full queue forgets it, to be asked again.
func (s *lookupState) ask(id string) {
	s.asked.Add(id, struct{}{})
	select {
	case s.queue <- id:
	default:
		s.asked.Remove(id) // ask again on the next update
		s.requests.WithLabelValues("skipped").Inc()
	}
}

// run starts the workers, which serve the queue until ctx ends.
func (s *lookupState) run(ctx context.Context) {
	for range s.workers {
		go func() {
			for {
				select {
				case <-ctx.Done():
					return
				case id := <-s.queue:
					lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
					recs, err := s.l.LookupExec(lctx, id)
					var roots []join.Process
					if rl, ok := s.l.(RootLookup); ok && err == nil && len(recs) > 0 {
						roots, err = rl.LookupRoots(lctx, id)
					}
					cancel()
					switch {
					case err != nil:
						s.asked.Remove(id) // a later update may ask again
						s.requests.WithLabelValues("error").Inc()
					case len(recs) == 0:
						s.requests.WithLabelValues("none").Inc()
					default:
						s.requests.WithLabelValues("found").Inc()
						select {
						case s.results <- lookedUp{id: id, recs: recs, roots: roots}:
						case <-ctx.Done():
							return
						}
					}
				}
			}
		}()
	}
}
