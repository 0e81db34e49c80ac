package agent

import (
	"context"
	"time"

	"github.com/execid/correlator/pkg/alert"
	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/store"
)

// Alerter turns a session or process into alerts; *alert.Engine is the
// production one.
type Alerter interface {
	Evaluate(in alert.Input, now time.Time) []store.Alert
}

// AlertOutlet takes alerts for delivery to SIEMs; *delivery.Dispatcher is the
// production one, durable once Submit returns.
type AlertOutlet interface {
	Submit(ctx context.Context, alerts []store.Alert) error
}

// Option adds an optional part to the agent.
type Option func(*Agent)

// WithAlerts evaluates every session and process update against the rules;
// alerts are stored with the batch and, when out is not nil, submitted for
// delivery. When e tells the rules that read attribution from the others
// (*alert.Engine does), those judge a process only once its attribution
// has settled (alerts_wait.go).
func WithAlerts(e Alerter, out AlertOutlet) Option {
	return func(a *Agent) { a.alerter, a.outlet = e, out }
}

// evaluate runs the rules on what changed in b. A process is evaluated
// with its session, or, for a claimant (it carried a session's ID without
// being attributed to it), with the session it claimed as in.Claimed: the
// victim's, never its own. Either comes from the same batch, or as the
// joiner holds it. in.Labels are the labels of the process's pod, else of
// its own session's pod (never the claimed session's), as this node last
// resolved them; nil for a pod none of this node's processes ran in.
//
// The rules that read attribution judge a process once its attribution
// has settled (evaluateProcess, alerts_wait.go); a session is its record,
// settled by definition.
func (a *Agent) evaluate(b *store.Batch, now time.Time) []store.Alert {
	if a.alerter == nil {
		return nil
	}
	var out []store.Alert
	byID := make(map[string]*join.Session, len(b.Sessions))
	for i := range b.Sessions {
		s := &b.Sessions[i]
		byID[s.AuditID] = s
		in := alert.Input{Session: s, Labels: a.labels.get(s.Namespace, s.Pod)}
		out = append(out, a.alerter.Evaluate(in, now)...)
	}
	done := make(map[string]bool, len(b.Processes)+len(b.Exits))
	for p := range b.AllProcesses() {
		done[p.ProcessID] = true
		out = append(out, a.evaluateProcess(p, byID, now)...)
	}
	return append(out, a.settleClaims(b, byID, done, now)...)
}

// inputOf is what the rules see of p: see evaluate.
func (a *Agent) inputOf(p *join.Process, byID map[string]*join.Session) alert.Input {
	in := alert.Input{Process: p, Labels: a.labels.get(p.Namespace, p.Pod)}
	switch {
	case p.AuditID != "":
		in.Session = a.sessionOf(byID, p.AuditID)
	case p.ClaimedAuditID != "":
		in.Claimed = a.sessionOf(byID, p.ClaimedAuditID)
	}
	if in.Labels == nil && in.Session != nil {
		in.Labels = a.labels.get(in.Session.Namespace, in.Session.Pod)
	}
	return in
}

// sessionOf returns session id from the batch's sessions (byID), else as
// the joiner holds it (remembered in byID), else nil.
func (a *Agent) sessionOf(byID map[string]*join.Session, id string) *join.Session {
	if s, ok := byID[id]; ok {
		return s
	}
	s := a.sessions.get(a.joiner, id)
	byID[id] = s
	return s
}

// sessionCache keeps what Joiner.Session answered while the joiner's
// records stay as they were (join.RecordsVersion): every exec of a session
// is evaluated with its session, which would otherwise be copied from the
// joiner, record and all, once per exec. Owned by the run loop.
type sessionCache struct {
	version uint64
	byID    map[string]*join.Session // nil: the joiner holds no such session
}

// maxCachedSessions bounds the cache; past it, it starts again.
const maxCachedSessions = 4096

func (c *sessionCache) get(j *join.Joiner, id string) *join.Session {
	if v := j.RecordsVersion(); c.byID == nil || v != c.version || len(c.byID) >= maxCachedSessions {
		c.version, c.byID = v, make(map[string]*join.Session)
	}
	if s, ok := c.byID[id]; ok {
		return s
	}
	var s *join.Session
	if js, ok := j.Session(id); ok {
		s = &js
	}
	c.byID[id] = s
	return s
}

// deliver hands alerts to the outlet; a failure is logged and counted, the
// alerts stay in the store. Every alert raised passes here, held ones too
// (alerts_wait.go), so here the agent remembers them for resolutions.
func (a *Agent) deliver(ctx context.Context, alerts []store.Alert) {
	a.resolved.remember(alerts)
	if a.outlet == nil || len(alerts) == 0 {
		return
	}
	if err := a.outlet.Submit(ctx, alerts); err != nil {
		a.alertFailures.Inc()
		a.log.Error().Err(err).Int("alerts", len(alerts)).Msg("submitting alerts for delivery")
	}
}
