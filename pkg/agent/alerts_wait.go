package agent

import (
	"container/list"
	"context"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/execid/correlator/pkg/alert"
	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/store"
	"github.com/execid/correlator/pkg/vocab"
)

// settlingAlerter is an Alerter that tells the rules that read attribution
// from those that do not (*alert.Engine is one): see
// alert.Engine.EvaluateUnsettled. An Alerter that is not one judges every
// process at once, as it is.
type settlingAlerter interface {
	EvaluateUnsettled(in alert.Input, now time.Time) (alerts []store.Alert, wait bool)
}

// verdictFlags are the join's flags that end a process's wait: the record
// it waited for was read and refused it, or the wait itself is over.
var verdictFlags = []string{vocab.FlagNoAuditRecord, vocab.FlagUncoveredExec, vocab.FlagPodMismatch,
	vocab.FlagDeniedExec, vocab.FlagFailedExec, vocab.FlagAuditIDReused, vocab.FlagAuditIDConflict}

// settlement says whether p's attribution has settled, and by what: it is
// attributed or ambiguous, the join gave a verdict (verdictFlags), the
// record of the ID it claims is read (in byID or held by the joiner), or
// it is a host process. Otherwise its audit record may still come.
//
// The join's own "still waiting" is not in join.Process: a process that
// carries no ID the output shows (a debug container's bridge ID) and one
// that is no exec session's look alike here, so both wait until the
// pending TTL. Only a rule that reads attribution and matches waits.
func (a *Agent) settlement(p *join.Process, byID map[string]*join.Session) (string, bool) {
	switch {
	case p.AuditID != "" || p.Attribution.Counted():
		return alert.SettledAttributed, true
	case p.Attribution == vocab.AttributionAmbiguous:
		return alert.SettledAmbiguous, true
	}
	for _, f := range verdictFlags {
		if slices.Contains(p.Flags, f) {
			return f, true
		}
	}
	if p.ClaimedAuditID != "" && a.sessionOf(byID, p.ClaimedAuditID) != nil {
		return alert.SettledRecord, true
	}
	if p.ContainerID == "" && p.Pod == "" {
		return alert.SettledHost, true
	}
	if !p.Pending {
		return alert.SettledFinal, true
	}
	return "", false
}

// alertWaits holds the processes whose rules that read attribution matched
// before it settled, oldest first, bounded by count; the run loop owns it.
type alertWaits struct {
	max     int
	ttl     time.Duration                  // the join's pending TTL: how long a wait may last
	order   *list.List                     // of *heldAlert, by since
	held    map[string]*list.Element       // process ID -> its element
	byClaim map[string]map[string]struct{} // claimed audit ID -> held process IDs

	deferred prometheus.Counter
	released *prometheus.CounterVec
	cleared  prometheus.Counter
	holding  prometheus.Gauge
}

// heldAlert is one held process: as last seen, and since when.
type heldAlert struct {
	p     join.Process
	since time.Time
}

// Why a held process was released (the released metric's reason).
const (
	releaseSettled  = "settled"
	releaseChanged  = "changed" // unsettled still, and no rule that waits matches any more
	releaseWaitOver = alert.SettledWaitOver
	releaseOverCap  = alert.SettledOverCap
	releaseStopping = alert.SettledStopping
)

func newAlertWaits(max int, ttl time.Duration, f promauto.Factory) *alertWaits {
	w := &alertWaits{max: max, ttl: ttl, order: list.New(), held: map[string]*list.Element{},
		byClaim: map[string]map[string]struct{}{},
		deferred: f.NewCounter(prometheus.CounterOpts{Name: "correlator_agent_alerts_deferred_total",
			Help: "Processes whose alert rules that read attribution matched before it settled, held until it does " +
				"(audit record read, join verdict, or --pending-ttl over)."}),
		released: f.NewCounterVec(prometheus.CounterOpts{Name: "correlator_agent_alerts_deferred_released_total",
			Help: "Held processes let go, by reason: settled (judged), changed (still unsettled, and no rule that waits " +
				"matches any more), wait_over (--pending-ttl passed: judged as it was), over_cap and stopping (judged " +
				"before they settled; their alerts say early)."}, []string{"reason"}),
		cleared: f.NewCounter(prometheus.CounterOpts{Name: "correlator_agent_alerts_deferred_cleared_total",
			Help: "Held processes let go without an alert: the unsettled state that matched was about to change."}),
		holding: f.NewGauge(prometheus.GaugeOpts{Name: "correlator_agent_alerts_deferred",
			Help: "Processes held now, waiting for their attribution to settle before the alert rules judge them."}),
	}
	for _, r := range []string{releaseSettled, releaseChanged, releaseWaitOver, releaseOverCap, releaseStopping} {
		w.released.WithLabelValues(r)
	}
	return w
}

// hold files p, or refreshes it if held (keeping since); over the cap it
// returns the oldest, no longer held, to be judged at once.
func (w *alertWaits) hold(p *join.Process, now time.Time) []*heldAlert {
	if el, ok := w.held[p.ProcessID]; ok {
		h := el.Value.(*heldAlert)
		w.unclaim(h)
		h.p = *p
		w.claim(h)
		return nil
	}
	var out []*heldAlert
	for len(w.held) >= w.max {
		out = append(out, w.drop(w.order.Front()))
	}
	h := &heldAlert{p: *p, since: now}
	w.held[p.ProcessID] = w.order.PushBack(h)
	w.claim(h)
	w.deferred.Inc()
	w.holding.Set(float64(len(w.held)))
	return out
}

// take stops holding a process, returning it (nil if it was not held).
func (w *alertWaits) take(processID string) *heldAlert {
	if w == nil {
		return nil
	}
	el, ok := w.held[processID]
	if !ok {
		return nil
	}
	return w.drop(el)
}

func (w *alertWaits) drop(el *list.Element) *heldAlert {
	h := w.order.Remove(el).(*heldAlert)
	delete(w.held, h.p.ProcessID)
	w.unclaim(h)
	w.holding.Set(float64(len(w.held)))
	return h
}

// due returns the held processes whose wait is over at now, oldest first;
// they stay held until judged.
func (w *alertWaits) due(now time.Time) []string {
	var out []string
	for el := w.order.Front(); el != nil; el = el.Next() {
		h := el.Value.(*heldAlert)
		if now.Before(h.since.Add(w.ttl)) {
			break
		}
		out = append(out, h.p.ProcessID)
	}
	return out
}

// all returns every held process ID, oldest first.
func (w *alertWaits) all() []string {
	out := make([]string, 0, len(w.held))
	for el := w.order.Front(); el != nil; el = el.Next() {
		out = append(out, el.Value.(*heldAlert).p.ProcessID)
	}
	return out
}

// claiming returns the held processes that claim session key id (or the
// audit ID it derives from: a reused ID's other requests).
func (w *alertWaits) claiming(id string) []string {
	if w == nil {
		return nil
	}
	var out []string
	for _, k := range []string{id, baseAuditID(id)} {
		for pid := range w.byClaim[k] {
			if !slices.Contains(out, pid) {
				out = append(out, pid)
			}
		}
	}
	slices.Sort(out)
	return out
}

func (w *alertWaits) claim(h *heldAlert) {
	if c := h.p.ClaimedAuditID; c != "" {
		if w.byClaim[c] == nil {
			w.byClaim[c] = map[string]struct{}{}
		}
		w.byClaim[c][h.p.ProcessID] = struct{}{}
	}
}

func (w *alertWaits) unclaim(h *heldAlert) {
	if c := h.p.ClaimedAuditID; c != "" {
		delete(w.byClaim[c], h.p.ProcessID)
		if len(w.byClaim[c]) == 0 {
			delete(w.byClaim, c)
		}
	}
}

// baseAuditID is the audit ID a session key derives from: the join keys a
// reused ID's other requests "<auditID>~<12 hex>".
func baseAuditID(key string) string {
	if i := strings.LastIndexByte(key, '~'); i > 0 && len(key)-i == 13 {
		return key[:i]
	}
	return key
}

// evaluateProcess judges p if its attribution has settled (or the alerter
// cannot wait); otherwise it raises the rules that do not read
// attribution, and holds p while one that does matches it.
func (a *Agent) evaluateProcess(p *join.Process, byID map[string]*join.Session, now time.Time) []store.Alert {
	sa, canWait := a.alerter.(settlingAlerter)
	by, settled := a.settlement(p, byID)
	in := a.inputOf(p, byID)
	if settled || !canWait {
		return a.judge(in, by, settled, now)
	}
	out, wait := sa.EvaluateUnsettled(in, now)
	if !wait && a.waits.take(p.ProcessID) != nil {
		// What matched has changed while unsettled: nothing to judge;
		// a later change is evaluated as it comes.
		a.waits.released.WithLabelValues(releaseChanged).Inc()
		a.waits.cleared.Inc()
		return out
	}
	if wait {
		for _, h := range a.waits.hold(p, now) {
			out = append(out, a.judgeHeld(h, byID, releaseOverCap, now)...)
		}
	}
	return out
}

// judge evaluates in as settled (by), or as it is when the alerter cannot
// wait (settled false), letting its process go if it was held.
func (a *Agent) judge(in alert.Input, by string, settled bool, now time.Time) []store.Alert {
	var h *heldAlert
	if in.Process != nil {
		h = a.waits.take(in.Process.ProcessID)
	}
	if h == nil {
		if settled {
			in.Settled = alert.NewSettled(by, 0)
		}
		return a.alerter.Evaluate(in, now)
	}
	in.Settled = alert.NewSettled(by, now.Sub(h.since))
	out := a.alerter.Evaluate(in, now)
	a.waits.released.WithLabelValues(releaseSettled).Inc()
	if len(out) == 0 {
		a.waits.cleared.Inc()
	}
	return out
}

// judgeHeld judges a process no longer held: as it is now, by what settled
// it if it has, else by why its wait ended (reason).
func (a *Agent) judgeHeld(h *heldAlert, byID map[string]*join.Session, reason string, now time.Time) []store.Alert {
	p := h.p
	if cur, ok := a.joiner.Process(p.ProcessID); ok {
		p = cur
	}
	by, settled := a.settlement(&p, byID)
	if !settled {
		by = reason
	}
	in := a.inputOf(&p, byID)
	in.Settled = alert.NewSettled(by, now.Sub(h.since))
	out := a.alerter.Evaluate(in, now)
	if settled {
		reason = releaseSettled
	}
	a.waits.released.WithLabelValues(reason).Inc()
	if len(out) == 0 {
		a.waits.cleared.Inc()
	}
	return out
}

// settleClaims evaluates again the held processes that claim a session
// this batch brought: the record they waited for is read, though the
// join's answer for them (not attributed) did not change, so the batch
// does not carry them. done are the processes the batch itself evaluated.
func (a *Agent) settleClaims(b *store.Batch, byID map[string]*join.Session, done map[string]bool, now time.Time) []store.Alert {
	var out []store.Alert
	for i := range b.Sessions {
		for _, pid := range a.waits.claiming(b.Sessions[i].AuditID) {
			el, ok := a.waits.held[pid]
			if done[pid] || !ok {
				continue
			}
			p := el.Value.(*heldAlert).p
			if cur, ok := a.joiner.Process(pid); ok {
				p = cur
			}
			done[pid] = true
			out = append(out, a.evaluateProcess(&p, byID, now)...)
		}
	}
	return out
}

// expireAlertWaits judges the held processes whose wait (the pending TTL)
// is over; the run loop calls it after the join's own expiry, whose
// verdicts have released those the join flagged.
func (a *Agent) expireAlertWaits(ctx context.Context, now time.Time) {
	if a.waits == nil {
		return
	}
	a.releaseHeld(ctx, a.waits.due(now), releaseWaitOver, now)
}

// stopAlertWaits judges every held process before the agent stops: a
// restarted agent does not see them again, and an alert judged early
// (it says so) is better than one never raised.
func (a *Agent) stopAlertWaits(ctx context.Context) {
	if a.waits == nil {
		return
	}
	a.releaseHeld(ctx, a.waits.all(), releaseStopping, a.now())
}

func (a *Agent) releaseHeld(ctx context.Context, ids []string, reason string, now time.Time) {
	if len(ids) == 0 {
		return
	}
	byID := map[string]*join.Session{}
	var alerts []store.Alert
	for _, pid := range ids {
		if h := a.waits.take(pid); h != nil {
			alerts = append(alerts, a.judgeHeld(h, byID, reason, now)...)
		}
	}
	if len(alerts) == 0 {
		return
	}
	if err := a.sink.Add(ctx, store.Batch{Alerts: alerts}); err != nil {
		a.log.Error().Err(err).Int("alerts", len(alerts)).Msg("queueing alerts of processes whose wait ended")
	}
	a.deliver(ctx, alerts)
}
