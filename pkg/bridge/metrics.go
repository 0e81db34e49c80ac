package bridge

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Metrics are the bridge's counters. A nil *Metrics records nothing.
type Metrics struct {
	requests  *prometheus.CounterVec
	mutations *prometheus.CounterVec
	skips     *prometheus.CounterVec
	errors    *prometheus.CounterVec
	callerKey *prometheus.CounterVec
	reloads   *prometheus.CounterVec
	latency   *prometheus.HistogramVec
}

var (
	kinds        = []Kind{KindExec, KindAttach, KindEphemeral, KindOther}
	skipReasons  = []string{SkipAttach, SkipEmptyCommand, SkipAnnotated, SkipWindows, SkipNoNew, SkipNotHandled, SkipUnrewritable}
	errorReasons = []string{ErrMalformed, ErrBadObject, ErrID, ErrLookup, ErrBodyTooLarge}
	keyActions   = []string{KeyOverwritten, KeyUnsetDropped, KeyUnparsed}
)

// NewMetrics registers the metrics on reg (none when reg is nil). A second
// set on one registry is a wiring error, returned.
func NewMetrics(reg prometheus.Registerer) (m *Metrics, err error) {
	defer func() { // promauto panics on a clash
		if r := recover(); r != nil {
			m, err = nil, fmt.Errorf("registering bridge metrics: %v", r)
		}
	}()
	f := promauto.With(reg)
	m = &Metrics{
		requests: f.NewCounterVec(prometheus.CounterOpts{
			Name: "correlator_bridge_requests_total",
			Help: "Admission requests the exec bridge answered, by kind (exec, attach, ephemeral, other).",
		}, []string{"kind"}),
		mutations: f.NewCounterVec(prometheus.CounterOpts{
			Name: "correlator_bridge_mutations_total",
			Help: "Requests the exec bridge patched with a fresh exec ID, by kind.",
		}, []string{"kind"}),
		skips: f.NewCounterVec(prometheus.CounterOpts{
			Name: "correlator_bridge_skips_total",
			Help: "Requests the exec bridge allowed unchanged, by reason.",
		}, []string{"reason"}),
		errors: f.NewCounterVec(prometheus.CounterOpts{
			Name: "correlator_bridge_errors_total",
			Help: "Requests the exec bridge could not read (allowed unchanged) or whose pod lookup failed (rewritten anyway), by reason.",
		}, []string{"reason"}),
		callerKey: f.NewCounterVec(prometheus.CounterOpts{
			Name: "correlator_bridge_caller_key_total",
			Help: "Exec commands that set or cleared the bridge's key themselves, by what the bridge did (overwritten, unset_dropped, unparsed).",
		}, []string{"action"}),
		reloads: f.NewCounterVec(prometheus.CounterOpts{
			Name: "correlator_bridge_cert_reloads_total",
			Help: "Serving certificate reloads after the files changed, by result (ok, error: the old certificate stays).",
		}, []string{"result"}),
		latency: f.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "correlator_bridge_request_duration_seconds",
			Help:    "Time the exec bridge took to answer an admission request, body read to response written, by kind.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}, []string{"kind"}),
	}
	// Pre-create the fixed label sets so dashboards see zeros.
	for _, k := range kinds {
		m.requests.WithLabelValues(string(k))
		m.mutations.WithLabelValues(string(k))
	}
	for _, r := range skipReasons {
		m.skips.WithLabelValues(r)
	}
	for _, r := range errorReasons {
		m.errors.WithLabelValues(r)
	}
	for _, a := range keyActions {
		m.callerKey.WithLabelValues(a)
	}
	for _, r := range []string{"ok", "error"} {
		m.reloads.WithLabelValues(r)
	}
	return m, nil
}

// decided records one answered request.
func (m *Metrics) decided(d Decision, took time.Duration) {
	if m == nil {
		return
	}
	k := string(d.Kind)
	m.requests.WithLabelValues(k).Inc()
	m.latency.WithLabelValues(k).Observe(took.Seconds())
	if d.Patch != nil {
		m.mutations.WithLabelValues(k).Inc()
	}
	if d.Skip != "" {
		m.skips.WithLabelValues(d.Skip).Inc()
	}
	if d.Error != "" {
		m.errors.WithLabelValues(d.Error).Inc()
	}
	for _, a := range d.CallerKey {
		m.callerKey.WithLabelValues(a).Inc()
	}
}

// failed records a request refused before a decision (unreadable, too large).
func (m *Metrics) failed(reason string) {
	if m != nil {
		m.errors.WithLabelValues(reason).Inc()
	}
}

func (m *Metrics) reloaded(ok bool) {
	if m == nil {
		return
	}
	r := "ok"
	if !ok {
		r = "error"
	}
	m.reloads.WithLabelValues(r).Inc()
}
