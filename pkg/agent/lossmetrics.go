package agent

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/execid/correlator/pkg/join"
)

// publishStats snapshots the joiner's counters from the run loop: the
// joiner is not safe for concurrent use, and scrapes come from elsewhere.
func (a *Agent) publishStats() {
	s := a.joiner.Stats()
	a.stats.Store(&s)
}

// joinCollector exports what the joiner let go of: entries evicted by its
// memory bounds (lost for the join), and processes that waited out the
// pending TTL with no record (flagged no_audit_record).
type joinCollector struct {
	snap    *atomic.Pointer[join.Stats]
	evicted *prometheus.Desc
	expired *prometheus.Desc
}

func newJoinCollector(snap *atomic.Pointer[join.Stats]) *joinCollector {
	return &joinCollector{
		snap: snap,
		evicted: prometheus.NewDesc("correlator_join_evicted_total",
			"Entries the joiner dropped to stay within its bounds, by kind: processes, pending (expired early), records, exits (of unknown processes).",
			[]string{"kind"}, nil),
		expired: prometheus.NewDesc("correlator_join_expired_total",
			"Processes that waited out --pending-ttl with no audit record (flagged no_audit_record).", nil, nil),
	}
}

func (c *joinCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.evicted
	ch <- c.expired
}

func (c *joinCollector) Collect(ch chan<- prometheus.Metric) {
	var s join.Stats
	if p := c.snap.Load(); p != nil {
		s = *p
	}
	for kind, v := range map[string]int64{"processes": s.EvictedProcesses, "pending": s.EvictedPending,
		"records": s.EvictedRecords, "exits": s.EvictedExits} {
		ch <- prometheus.MustNewConstMetric(c.evicted, prometheus.CounterValue, float64(v), kind)
	}
	ch <- prometheus.MustNewConstMetric(c.expired, prometheus.CounterValue, float64(s.Expired))
}
