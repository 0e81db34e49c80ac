package alert

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/rs/zerolog"

	"github.com/execid/correlator/pkg/store"
)

// DefaultRecentIDs is how many alert IDs an Engine remembers to suppress
// repeats (the joiner re-emits a process as it learns more about it).
const DefaultRecentIDs = 65536

// Engine evaluates rules over inputs. It is safe for concurrent use.
type Engine struct {
	rules  []Rule
	log    zerolog.Logger
	m      *engineMetrics
	recent *lru.Cache[string, struct{}]
}

// EngineOption tunes an Engine.
type EngineOption func(*engineOptions)

type engineOptions struct{ recentIDs int }

// WithRecentIDs sets how many emitted alert IDs are remembered to suppress
// repeats; 0 turns suppression off (every match is returned).
func WithRecentIDs(n int) EngineOption { return func(o *engineOptions) { o.recentIDs = n } }

// NewEngine compiles rules (those from ParseRules already are) and
// registers the engine's metrics on reg, if not nil (registering them twice
// panics). A rule that does not compile is an error naming it.
func NewEngine(rules []Rule, log zerolog.Logger, reg prometheus.Registerer, opts ...EngineOption) (*Engine, error) {
	o := engineOptions{recentIDs: DefaultRecentIDs}
	for _, opt := range opts {
		opt(&o)
	}
	e := &Engine{log: log.With().Str("component", "alert-engine").Logger()}
	seen := map[string]bool{}
	for i, r := range rules {
		if !r.compiled {
			if err := r.compile(); err != nil {
				return nil, &RuleError{Index: i, Name: r.Name, Err: err}
			}
		}
		if seen[r.Name] {
			return nil, &RuleError{Index: i, Name: r.Name, Err: errors.New("duplicate rule name")}
		}
		seen[r.Name] = true
		e.rules = append(e.rules, r)
	}
	e.m = newEngineMetrics(reg, e.rules)
	if o.recentIDs > 0 {
		e.recent, _ = lru.New[string, struct{}](o.recentIDs)
	}
	return e, nil
}

// Rules returns the engine's rules.
func (e *Engine) Rules() []Rule { return e.rules }

// CountRuleErrors logs and counts the rule errors in err (from
// ParseRules), returning how many there were.
func (e *Engine) CountRuleErrors(err error) int {
	if err == nil {
		return 0
	}
	n := 0
	var walk func(error)
	walk = func(err error) {
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			for _, x := range j.Unwrap() {
				walk(x)
			}
			return
		}
		n++
		e.log.Warn().Err(err).Msg("skipping alert rule")
	}
	walk(err)
	e.m.ruleErrors.Add(float64(n))
	return n
}

// Evaluate returns an alert for every rule the input matches, except those
// emitted recently (same ID). now is the alerts' Time. A process is judged
// as it is: the caller evaluates one whose attribution has not settled with
// EvaluateUnsettled instead.
func (e *Engine) Evaluate(in Input, now time.Time) []store.Alert {
	out, _ := e.evaluate(&in, now, false)
	return out
}

// EvaluateUnsettled evaluates a process whose attribution has not settled
// (its audit record is still to come, or the join still holds it). The
// rules that do not read attribution raise their alerts now, as Evaluate
// would. Of those that do (Rule.WaitsForAttribution), none raises, counts
// or is remembered: wait reports whether one matches the process as it is,
// so that the caller holds it and calls Evaluate once it has settled.
func (e *Engine) EvaluateUnsettled(in Input, now time.Time) (alerts []store.Alert, wait bool) {
	return e.evaluate(&in, now, true)
}

func (e *Engine) evaluate(in *Input, now time.Time, unsettled bool) ([]store.Alert, bool) {
	e.m.evaluations.Inc()
	var out []store.Alert
	wait := false
	for i := range e.rules {
		r := &e.rules[i]
		if !r.applies(in) {
			continue
		}
		if unsettled && r.waits && wait {
			continue // one is enough to hold the process
		}
		mt := matcher{in: in}
		if !mt.match(&r.Match) {
			continue
		}
		if unsettled && r.waits {
			wait = true
			continue
		}
		id, processID, matched := r.key(in, mt.facts)
		if e.recent != nil {
			if ok, _ := e.recent.ContainsOrAdd(id, struct{}{}); ok {
				e.m.suppressed.Inc()
				continue
			}
		}
		e.m.matches.WithLabelValues(r.Name).Inc()
		a, err := e.build(r, in, id, processID, matched, now)
		if err != nil {
			e.log.Error().Err(err).Str("rule", r.Name).Msg("building alert")
			continue
		}
		out = append(out, a)
	}
	return out, wait
}

func (e *Engine) build(r *Rule, in *Input, id, processID, matched string, now time.Time) (store.Alert, error) {
	unresolved := 0
	msg := Expand(r.Message, func(name string) string {
		v, ok := in.field(r, matched, name)
		if !ok {
			unresolved++
			return syntaxWrap(name)
		}
		return v
	})
	if unresolved > 0 {
		e.m.templateUnresolved.WithLabelValues(r.Name).Add(float64(unresolved))
	}
	pin := in
	if !r.waits && in.Settled != nil {
		// It did not wait: its alert says nothing of a wait.
		cp := *in
		cp.Settled = nil
		pin = &cp
	}
	payload, err := json.Marshal(payload{
		Rule:    ruleRef{Name: r.Name, Description: r.Description, Severity: r.Severity},
		Matched: matched,
		Input:   pin,
	})
	if err != nil {
		return store.Alert{}, fmt.Errorf("encoding alert payload: %w", err)
	}
	return store.Alert{
		ID:        id,
		Time:      now.UTC(),
		Rule:      r.Name,
		Severity:  r.Severity,
		Message:   strings.ToValidUTF8(msg, "\uFFFD"), // as JSON and syslog would carry it
		AuditID:   in.auditID(),
		ProcessID: processID,
		Payload:   payload,
	}, nil
}

// payload is an alert's Payload: the rule, what matched, and the input.
type payload struct {
	Rule    ruleRef `json:"rule"`
	Matched string  `json:"matched,omitempty"`
	*Input
}

type ruleRef struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	Severity    string `json:"severity"`
}

// applies reports whether r judges an input like in (its scope).
func (r *Rule) applies(in *Input) bool {
	return !(r.Scope == ScopeProcess && in.Process == nil) && !(r.Scope == ScopeSession && in.Session == nil)
}

// key is the ID of r's alert on in, given the facts it matched, with the
// process it is about and the facts joined.
func (r *Rule) key(in *Input, facts []string) (id, processID, matched string) {
	auditID := in.auditID()
	if in.Process != nil && r.Scope != ScopeSession {
		processID = in.Process.ProcessID
		if !r.waits {
			// About the process alone, whether or not it has a
			// session yet: one ID before and after attribution.
			auditID = ""
		}
	}
	matched = strings.Join(facts, " ")
	return alertID(r.Name, auditID, processID, matched), processID, matched
}

// alertID is stable across restarts: the same rule, session, process and
// matched fact give the same ID; fields are length-prefixed so that no two
// tuples collide by concatenation. A rule that does not read attribution
// passes no session for a process (see evaluate).
func alertID(rule, auditID, processID, matched string) string {
	h := sha256.New()
	for _, s := range []string{rule, auditID, processID, matched} {
		fmt.Fprintf(h, "%d:%s;", len(s), s)
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

type engineMetrics struct {
	evaluations        prometheus.Counter
	matches            *prometheus.CounterVec
	templateUnresolved *prometheus.CounterVec
	ruleErrors         prometheus.Counter
	suppressed         prometheus.Counter
	resolutions        *prometheus.CounterVec
}

func newEngineMetrics(reg prometheus.Registerer, rules []Rule) *engineMetrics {
	f := promauto.With(reg)
	m := &engineMetrics{
		evaluations: f.NewCounter(prometheus.CounterOpts{
			Name: "correlator_alert_evaluations_total",
			Help: "Inputs (sessions or processes) evaluated against the alert rules.",
		}),
		matches: f.NewCounterVec(prometheus.CounterOpts{
			Name: "correlator_alert_rule_matches_total",
			Help: "Alerts raised, by rule (repeats suppressed by ID are not counted).",
		}, []string{"rule"}),
		templateUnresolved: f.NewCounterVec(prometheus.CounterOpts{
			Name: "correlator_alert_template_unresolved_total",
			Help: "Message template references left verbatim because the input lacked them (a pod label), by rule.",
		}, []string{"rule"}),
		ruleErrors: f.NewCounter(prometheus.CounterOpts{
			Name: "correlator_alert_rule_errors_total",
			Help: "Alert rules skipped because they did not parse or compile.",
		}),
		suppressed: f.NewCounter(prometheus.CounterOpts{
			Name: "correlator_alert_suppressed_total",
			Help: "Matches not raised again because an alert with the same ID was raised recently.",
		}),
		resolutions: f.NewCounterVec(prometheus.CounterOpts{
			Name: "correlator_alert_resolutions_total",
			Help: "Alerts resolved because the process as it later was (a late audit record) contradicts them, by rule.",
		}, []string{"rule"}),
	}
	for _, r := range rules {
		m.matches.WithLabelValues(r.Name)
		m.templateUnresolved.WithLabelValues(r.Name)
		m.resolutions.WithLabelValues(r.Name)
	}
	return m
}
