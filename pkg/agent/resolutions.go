package agent

import (
	"context"
	"slices"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/execid/correlator/pkg/alert"
	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/store"
	"github.com/execid/correlator/pkg/vocab"
)

// An audit record later than --pending-ttl attributes processes the rules
// had already judged unattributed (no-audit-record, uncovered-exec, a root
// judged without its session). Such alerts are resolved, never left
// standing: the agent remembers what it raised per process, and when a
// process first comes flagged late_audit_record it asks the engine which
// of them the process as it now is contradicts. The resolutions go with
// the batch to the store and the sinks, under the alerts' own IDs.

// resolvingAlerter is an Alerter that can tell which alerts raised on a
// process the process as it now is contradicts (*alert.Engine is one). An
// Alerter that is not one resolves nothing.
type resolvingAlerter interface {
	Resolve(in alert.Input, raised []store.Alert, now time.Time) []store.Alert
}

// AlertHistory reads stored alerts back; the store backends are ones.
type AlertHistory interface {
	ListAlerts(ctx context.Context, f store.AlertFilter) ([]store.Alert, string, error)
}

// WithAlertHistory reads from h the alerts raised on a process that the
// agent does not remember (raised before it started, or forgotten past its
// bound), when a late record may contradict them.
func WithAlertHistory(h AlertHistory) Option {
	return func(a *Agent) { a.resolved.history = h }
}

const (
	// maxRaisedProcesses bounds the processes whose alerts are remembered,
	// and those already checked for resolutions.
	maxRaisedProcesses = 65536
	// maxRaisedPerProcess bounds the alerts remembered, and read back, per
	// process: the shipped rules raise a few at most.
	maxRaisedPerProcess = 100
	// historyBudget bounds the store reads of one batch: the run loop
	// waits for them.
	historyBudget = 5 * time.Second
)

// resolutions remembers the alerts raised per process; the run loop owns
// it.
type resolutions struct {
	raised  *simplelru.LRU[string, []store.Alert] // process ID -> its alerts, without payloads
	checked *simplelru.LRU[string, struct{}]      // processes already seen late
	history AlertHistory                          // nil: only what is remembered
	// started and forgot say when a process's alerts may lie outside
	// raised: it started before the agent's first update (an agent before
	// this one may have judged it), or raised has evicted.
	started time.Time
	forgot  bool

	evicted         prometheus.Counter
	historyFailures prometheus.Counter
}

func newResolutions(f promauto.Factory) *resolutions {
	r := &resolutions{
		evicted: f.NewCounter(prometheus.CounterOpts{Name: "correlator_agent_raised_alerts_evicted_total",
			Help: "Processes whose raised alerts the agent forgot past its bound (65536 processes): a late audit " +
				"record for one reads them from the store to resolve them."}),
		historyFailures: f.NewCounter(prometheus.CounterOpts{Name: "correlator_agent_alert_history_failures_total",
			Help: "Reads of a process's stored alerts that failed: alerts a late audit record contradicts may stay unresolved."}),
	}
	r.raised, _ = simplelru.NewLRU[string, []store.Alert](maxRaisedProcesses, nil)
	r.checked, _ = simplelru.NewLRU[string, struct{}](maxRaisedProcesses, nil)
	return r
}

// remember files the alerts raised on processes; a resolution marks the
// one it resolves.
func (r *resolutions) remember(alerts []store.Alert) {
	for _, al := range alerts {
		if al.ProcessID == "" {
			continue // a session's: no process update resolves it
		}
		al.Payload = nil
		list, _ := r.raised.Peek(al.ProcessID)
		if i := slices.IndexFunc(list, func(x store.Alert) bool { return x.ID == al.ID }); i >= 0 {
			list[i] = al
			continue
		}
		if len(list) >= maxRaisedPerProcess {
			list = slices.Delete(list, 0, 1)
		}
		if r.raised.Add(al.ProcessID, append(list, al)) {
			r.evicted.Inc()
			r.forgot = true
		}
	}
}

// firstLate reports whether p is flagged late_audit_record and was not
// seen so before.
func (r *resolutions) firstLate(p *join.Process) bool {
	if !slices.Contains(p.Flags, vocab.FlagLateAuditRecord) || r.checked.Contains(p.ProcessID) {
		return false
	}
	r.checked.Add(p.ProcessID, struct{}{})
	return true
}

// raisedOn returns the alerts raised on p: as remembered, else as stored.
// A process this agent saw start, with nothing forgotten since, raised
// only what is remembered: the store is not asked.
func (r *resolutions) raisedOn(ctx context.Context, p *join.Process) ([]store.Alert, error) {
	if list, ok := r.raised.Get(p.ProcessID); ok {
		return list, nil
	}
	start := p.Start
	if start.IsZero() {
		start = p.ExecTime
	}
	if r.history == nil || (!r.forgot && start.After(r.started)) {
		return nil, nil
	}
	list, _, err := r.history.ListAlerts(ctx, store.AlertFilter{ProcessID: p.ProcessID, Limit: maxRaisedPerProcess})
	if err != nil {
		r.historyFailures.Inc()
		return nil, err
	}
	return list, nil
}

// resolveLate returns the resolutions of the alerts that b's processes,
// flagged late_audit_record for the first time, now contradict. A process
// held for its attribution (alerts_wait.go) raised nothing yet, so has
// nothing to resolve; one judged when its wait ran out has.
func (a *Agent) resolveLate(ctx context.Context, b *store.Batch, now time.Time) []store.Alert {
	if a.resolved.started.IsZero() {
		a.resolved.started = now // on the agent's clock, as processes' starts are
	}
	ra, ok := a.alerter.(resolvingAlerter)
	if !ok {
		return nil
	}
	var out []store.Alert
	var byID map[string]*join.Session
	var cancel context.CancelFunc
	for p := range b.AllProcesses() {
		if !a.resolved.firstLate(p) {
			continue
		}
		if cancel == nil {
			ctx, cancel = context.WithTimeout(ctx, historyBudget)
			defer cancel()
		}
		raised, err := a.resolved.raisedOn(ctx, p)
		if err != nil {
			a.log.Warn().Err(err).Str("process", p.ProcessID).Msg("reading stored alerts of a late-attributed process")
			a.resolved.checked.Remove(p.ProcessID) // its next update tries again
		}
		raised = slices.DeleteFunc(slices.Clone(raised), func(x store.Alert) bool { return x.Status == store.AlertResolved })
		if len(raised) == 0 {
			continue
		}
		if byID == nil {
			byID = make(map[string]*join.Session, len(b.Sessions))
			for i := range b.Sessions {
				byID[b.Sessions[i].AuditID] = &b.Sessions[i]
			}
		}
		out = append(out, ra.Resolve(a.inputOf(p, byID), raised, now)...)
	}
	return out
}
