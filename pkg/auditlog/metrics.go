package auditlog

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Metrics are the ingestion counters. A nil *Metrics records nothing.
type Metrics struct {
	recordsRead     *prometheus.CounterVec
	recordsSkipped  *prometheus.CounterVec
	idsTruncated    prometheus.Counter
	webhookRequests *prometheus.CounterVec
	webhookRefused  *prometheus.CounterVec
	tailGaps        *prometheus.CounterVec
	tailLag         *prometheus.GaugeVec
}

// NewMetrics creates the metrics on reg (none when reg is nil). A second
// set on one registry is a wiring error, returned.
func NewMetrics(reg prometheus.Registerer) (m *Metrics, err error) {
	defer func() { // promauto panics on a clash
		if r := recover(); r != nil {
			m, err = nil, fmt.Errorf("registering audit metrics: %v", r)
		}
	}()
	f := promauto.With(reg)
	m = &Metrics{
		recordsRead: f.NewCounterVec(prometheus.CounterOpts{
			Name: "correlator_audit_records_read_total",
			Help: "Audit events decoded, by source kind.",
		}, []string{"source"}),
		recordsSkipped: f.NewCounterVec(prometheus.CounterOpts{
			Name: "correlator_audit_records_skipped_total",
			Help: "Audit records skipped as unreadable, by reason.",
		}, []string{"reason"}),
		idsTruncated: f.NewCounter(prometheus.CounterOpts{
			Name: "correlator_audit_ids_truncated_total",
			Help: "Audit events whose auditID (a client's Audit-ID header, taken verbatim) was longer than 256 bytes, kept as a prefix and a hash.",
		}),
		webhookRequests: f.NewCounterVec(prometheus.CounterOpts{
			Name: "correlator_audit_webhook_requests_total",
			Help: "Audit webhook requests, by result.",
		}, []string{"result"}),
		webhookRefused: f.NewCounterVec(prometheus.CounterOpts{
			Name: "correlator_audit_webhook_refused_total",
			Help: "Audit webhook deliveries answered with an error, so not taken in, by reason.",
		}, []string{"reason"}),
		tailGaps: f.NewCounterVec(prometheus.CounterOpts{
			Name: "correlator_audit_tail_gaps_total",
			Help: "Places where the audit log tailer could not read records written to a file, by reason; each gap may hold any number of records.",
		}, []string{"reason"}),
		tailLag: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "correlator_audit_tail_lag_bytes",
			Help: "Bytes of the audit log file not yet read, by path.",
		}, []string{"path"}),
	}
	// Pre-create the fixed label sets so dashboards see zeros.
	for _, r := range Reasons() {
		m.recordsSkipped.WithLabelValues(r.String())
	}
	for _, r := range refusalReasons {
		m.webhookRefused.WithLabelValues(r)
	}
	for _, r := range gapReasons {
		m.tailGaps.WithLabelValues(r)
	}
	return m, nil
}

func (m *Metrics) read(source string, n int64) {
	if m != nil && n > 0 {
		m.recordsRead.WithLabelValues(source).Add(float64(n))
	}
}

func (m *Metrics) skipped(r Reason) {
	if m != nil {
		m.recordsSkipped.WithLabelValues(r.String()).Inc()
	}
}

func (m *Metrics) idsCut(n int64) {
	if m != nil && n > 0 {
		m.idsTruncated.Add(float64(n))
	}
}

func (m *Metrics) webhook(result string) {
	if m != nil {
		m.webhookRequests.WithLabelValues(result).Inc()
	}
}

func (m *Metrics) refused(reason string) {
	if m != nil {
		m.webhookRefused.WithLabelValues(reason).Inc()
	}
}

func (m *Metrics) gap(reason string) {
	if m != nil {
		m.tailGaps.WithLabelValues(reason).Inc()
	}
}

func (m *Metrics) lag(path string, bytes int64) {
	if m != nil {
		m.tailLag.WithLabelValues(path).Set(float64(bytes))
	}
}
