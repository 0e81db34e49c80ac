package meta

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// metrics are the resolver counters. A nil *metrics records nothing.
type metrics struct {
	cacheHits      prometheus.Counter
	cacheMisses    prometheus.Counter
	cacheEvictions prometheus.Counter
	resolvedBy     *prometheus.CounterVec
	sourceErrors   *prometheus.CounterVec
	criRefreshes   *prometheus.CounterVec
	criStatuses    *prometheus.CounterVec
}

// newMetrics creates the metrics on reg (none when reg is nil), every
// labelled series at zero so that a dashboard line exists before the first.
func newMetrics(reg prometheus.Registerer) (m *metrics, err error) {
	// promauto panics on a clash; a second resolver on one registry is a
	// wiring error the caller reports.
	defer func() {
		if r := recover(); r != nil {
			m, err = nil, fmt.Errorf("%v", r)
		}
	}()
	f := promauto.With(reg)
	m = &metrics{
		cacheHits: f.NewCounter(prometheus.CounterOpts{
			Name: "correlator_meta_cache_hits_total",
			Help: "Container lookups answered from the cache, misses cached as such included.",
		}),
		cacheMisses: f.NewCounter(prometheus.CounterOpts{
			Name: "correlator_meta_cache_misses_total",
			Help: "Container lookups that went to the sources.",
		}),
		cacheEvictions: f.NewCounter(prometheus.CounterOpts{
			Name: "correlator_meta_cache_evictions_total",
			Help: "Cache entries evicted to keep the cache within its size.",
		}),
		resolvedBy: f.NewCounterVec(prometheus.CounterOpts{
			Name: "correlator_meta_resolved_total",
			Help: "Container lookups that went to the sources, by the source that answered (none: not found).",
		}, []string{"source"}),
		sourceErrors: f.NewCounterVec(prometheus.CounterOpts{
			Name: "correlator_meta_source_errors_total",
			Help: "Lookups a source could not answer because of an error, by source.",
		}, []string{"source"}),
		criRefreshes: f.NewCounterVec(prometheus.CounterOpts{
			Name: "correlator_meta_cri_refreshes_total",
			Help: "CRI container listings, by result (ok, error, or limited: a miss that did not list because of the rate limit).",
		}, []string{"result"}),
		criStatuses: f.NewCounterVec(prometheus.CounterOpts{
			Name: "correlator_meta_cri_status_lookups_total",
			Help: "CRI lookups of one container (ContainerStatus, then its pod's sandbox) on a miss the listing rate limit refused, by result (ok, not_found, error, or limited: no lookup because of its own rate limit).",
		}, []string{"result"}),
	}
	for _, s := range []string{"podmap", "cri", "cgroup", "none"} {
		m.resolvedBy.WithLabelValues(s)
	}
	for _, s := range []string{"podmap", "cri"} {
		m.sourceErrors.WithLabelValues(s)
	}
	for _, r := range []string{"ok", "error", "limited"} {
		m.criRefreshes.WithLabelValues(r)
	}
	for _, r := range []string{"ok", "not_found", "error", "limited"} {
		m.criStatuses.WithLabelValues(r)
	}
	return m, nil
}

func (m *metrics) cacheHit() {
	if m != nil {
		m.cacheHits.Inc()
	}
}

func (m *metrics) cacheMiss() {
	if m != nil {
		m.cacheMisses.Inc()
	}
}

func (m *metrics) cacheEviction() {
	if m != nil {
		m.cacheEvictions.Inc()
	}
}

func (m *metrics) resolved(source string) {
	if m != nil {
		m.resolvedBy.WithLabelValues(source).Inc()
	}
}

func (m *metrics) sourceError(source string) {
	if m != nil {
		m.sourceErrors.WithLabelValues(source).Inc()
	}
}

func (m *metrics) criRefresh(result string) {
	if m != nil {
		m.criRefreshes.WithLabelValues(result).Inc()
	}
}

func (m *metrics) criStatus(result string) {
	if m != nil {
		m.criStatuses.WithLabelValues(result).Inc()
	}
}
