package delivery

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/rs/zerolog"
)

// dispatchMetrics are the per-sink delivery metrics.
type dispatchMetrics struct {
	sent, failures, retries, spooled *prometheus.CounterVec
	dropped, cursorInvalid           *prometheus.CounterVec
	depth, depthBytes                *prometheus.GaugeVec
}

// dropReasons: overflow (spool full, oldest dropped), too_large (one alert
// larger than the spool), corrupt (torn or damaged spool records), rejected
// (the receiver refused the batch as malformed; retrying cannot help),
// disk_full (the spool's filesystem had no room for a new alert),
// write_error (writing the spool failed otherwise).
var dropReasons = []string{"overflow", "too_large", "corrupt", "rejected", "disk_full", "write_error"}

func newDispatchMetrics(reg prometheus.Registerer) *dispatchMetrics {
	f := promauto.With(reg)
	cv := func(name, help string, labels ...string) *prometheus.CounterVec {
		return f.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, append([]string{"sink"}, labels...))
	}
	gv := func(name, help string) *prometheus.GaugeVec {
		return f.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, []string{"sink"})
	}
	return &dispatchMetrics{
		sent:     cv("correlator_alert_sink_sent_total", "Alerts a sink accepted."),
		failures: cv("correlator_alert_sink_failures_total", "Delivery attempts (batches) that failed."),
		retries:  cv("correlator_alert_sink_retries_total", "Alerts sent again after a failed attempt."),
		spooled:  cv("correlator_alert_spooled_total", "Alerts written to a sink's spool."),
		dropped:  cv("correlator_alert_dropped_total", "Alerts dropped, by reason.", "reason"),
		cursorInvalid: cv("correlator_alert_spool_cursor_invalid_total",
			"Spool read positions found unreadable at start; delivery restarted at the oldest spooled alert, so some may be sent again."),
		depth:      gv("correlator_alert_spool_depth", "Alerts in a sink's spool, not yet delivered."),
		depthBytes: gv("correlator_alert_spool_bytes", "Bytes of undelivered alerts in a sink's spool."),
	}
}

// sinkEvents binds the metrics and the logger to one sink, for its spool.
type sinkEvents struct {
	m    *dispatchMetrics
	sink string
	log  zerolog.Logger
}

func (e sinkEvents) dropped(reason string, n int) {
	e.m.dropped.WithLabelValues(e.sink, reason).Add(float64(n))
}

func (e sinkEvents) depth(entries int, bytes int64) {
	e.m.depth.WithLabelValues(e.sink).Set(float64(entries))
	e.m.depthBytes.WithLabelValues(e.sink).Set(float64(bytes))
}

func (e sinkEvents) cursorInvalid(err error) {
	e.m.cursorInvalid.WithLabelValues(e.sink).Inc()
	e.log.Warn().Err(err).Msg("spool cursor unreadable: delivering again from the oldest spooled alert")
}

func (e sinkEvents) init() {
	for _, c := range []*prometheus.CounterVec{e.m.sent, e.m.failures, e.m.retries, e.m.spooled, e.m.cursorInvalid} {
		c.WithLabelValues(e.sink)
	}
	for _, r := range dropReasons {
		e.m.dropped.WithLabelValues(e.sink, r)
	}
}
