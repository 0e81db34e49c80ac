package agent

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/execid/correlator/pkg/auditlog"
	"github.com/execid/correlator/pkg/join"
)

// lossStats is what the run loop publishes for scrapes.
type lossStats struct {
	join   join.Stats
	merger auditlog.MergerStats
	labels int64 // pods whose labels the alert rules lost
}

// publishStats snapshots the counters from the run loop: the joiner and
// the merger are not safe for concurrent use, and scrapes come from
// elsewhere.
func (a *Agent) publishStats() {
	st := a.joiner.Stats()
	a.release.observe(st) // before the snapshot: whoever waits on it sees the pages returned
	a.mem.observe()
	a.stats.Store(&lossStats{join: st, merger: a.merger.Stats(), labels: a.labels.shed()})
}

// joinCollector exports what the join let go of: entries evicted by its
// memory bounds (lost for the join; pod_labels: pods whose labels the alert
// rules no longer see), and processes that waited out the pending TTL with
// no record (flagged no_audit_record).
type joinCollector struct {
	snap      *atomic.Pointer[lossStats]
	evicted   *prometheus.Desc
	expired   *prometheus.Desc
	uncovered *prometheus.Desc
	late      *prometheus.Desc
	held      *prometheus.Desc
	heldBytes *prometheus.Desc
	idle      *prometheus.Desc
}

func newJoinCollector(snap *atomic.Pointer[lossStats]) *joinCollector {
	return &joinCollector{
		snap: snap,
		evicted: prometheus.NewDesc("correlator_join_evicted_total",
			"Entries the join dropped to stay within its bounds, by kind: processes, pending (expired early), records, "+
				"denied (records of refused requests), exits (of unknown processes), merger (requests whose stages were being merged), "+
				"pod_labels (pods whose labels the alert rules no longer see), roots (verified session roots whose hold on their "+
				"request was forgotten), roots_over_cap (verified roots past 64 under one audit ID, never attributed).",
			[]string{"kind"}, nil),
		expired: prometheus.NewDesc("correlator_join_expired_total",
			"Processes that waited out --pending-ttl with no audit record (flagged no_audit_record).", nil, nil),
		uncovered: prometheus.NewDesc("correlator_join_uncovered_execs_total",
			"Exec roots the runtime exec'd that no allowed exec request of their pod explained after --pending-ttl "+
				"(flagged uncovered_exec): execs that bypassed admission, such as nodes/proxy or a runtime exec on the node.", nil, nil),
		late: prometheus.NewDesc("correlator_join_late_total",
			"Processes and records past --pending-ttl, by kind: processes (answered by a record after their wait ended, "+
				"flagged late_audit_record), kept (exited exec-session processes held past the TTL for such a record, "+
				"--late-window), forgotten (those that left still unanswered: the window over, or a bound; their rows keep "+
				"what was said), restored (unattributed processes read back from the store at start).",
			[]string{"kind"}, nil),
		held: prometheus.NewDesc("correlator_join_held",
			"What the join holds now, by kind: processes, pending (of those, waiting for a record), records, denied "+
				"(of those, refused requests), merger (requests whose stages are being merged).", []string{"kind"}, nil),
		heldBytes: prometheus.NewDesc("correlator_join_held_bytes",
			"Estimated heap of what the join holds now, by kind: processes, records, merger.", []string{"kind"}, nil),
		idle: prometheus.NewDesc("correlator_audit_merger_idle_total",
			"Requests the stage merger let go after no stage came for a while (2 minutes once complete, an hour while "+
				"open): not lost, a later stage reaches the joiner alone and is folded into what it holds.", nil, nil),
	}
}

func (c *joinCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.evicted
	ch <- c.expired
	ch <- c.uncovered
	ch <- c.late
	ch <- c.held
	ch <- c.heldBytes
	ch <- c.idle
}

func (c *joinCollector) Collect(ch chan<- prometheus.Metric) {
	var s lossStats
	if p := c.snap.Load(); p != nil {
		s = *p
	}
	j := &s.join
	for kind, v := range map[string]int64{"processes": j.EvictedProcesses, "pending": j.EvictedPending,
		"records": j.EvictedRecords, "denied": j.EvictedDenied, "exits": j.EvictedExits, "merger": s.merger.Evicted, "pod_labels": s.labels,
		"roots": j.EvictedRoots, "roots_over_cap": j.RootsOverCap} {
		ch <- prometheus.MustNewConstMetric(c.evicted, prometheus.CounterValue, float64(v), kind)
	}
	ch <- prometheus.MustNewConstMetric(c.expired, prometheus.CounterValue, float64(j.Expired))
	ch <- prometheus.MustNewConstMetric(c.uncovered, prometheus.CounterValue, float64(j.UncoveredExecs))
	for kind, v := range map[string]int64{"processes": j.LateProcesses, "kept": j.LateKept, "forgotten": j.LateForgotten,
		"restored": j.Restored} {
		ch <- prometheus.MustNewConstMetric(c.late, prometheus.CounterValue, float64(v), kind)
	}
	for kind, v := range map[string]int{"processes": j.Processes, "pending": j.Pending, "records": j.Records,
		"denied": j.DeniedRecords, "merger": s.merger.Records} {
		ch <- prometheus.MustNewConstMetric(c.held, prometheus.GaugeValue, float64(v), kind)
	}
	for kind, v := range map[string]int{"processes": j.ProcessBytes, "records": j.RecordBytes, "merger": s.merger.Bytes} {
		ch <- prometheus.MustNewConstMetric(c.heldBytes, prometheus.GaugeValue, float64(v), kind)
	}
	ch <- prometheus.MustNewConstMetric(c.idle, prometheus.CounterValue, float64(s.merger.Expired))
}
