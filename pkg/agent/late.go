package agent

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/execid/correlator/pkg/auditlog"
	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/store"
)

// A record later than --pending-ttl still names the user: the joiner keeps
// exec sessions' processes for --late-window (join/late.go), and after a
// restart the agent hands it back what the store kept unattributed. This
// file counts late records and restores.

// lateMetrics counts the records that answered processes after their wait
// had ended, and how late they were.
type lateMetrics struct {
	records prometheus.Counter
	delay   prometheus.Histogram
}

func newLateMetrics(f promauto.Factory) *lateMetrics {
	return &lateMetrics{
		records: f.NewCounter(prometheus.CounterOpts{Name: "correlator_agent_late_records_total",
			Help: "Audit records that answered processes after their wait had ended (--pending-ttl): the processes are " +
				"flagged late_audit_record, and alerts raised meanwhile resolved where the record contradicts them."}),
		delay: f.NewHistogram(prometheus.HistogramOpts{Name: "correlator_agent_late_record_delay_seconds",
			Help: "How late such records were: from the request's requestReceived to the record reaching the joiner.",
			// 30 s to about 34 hours: the clouds' minutes to an outage's backlog.
			Buckets: prometheus.ExponentialBuckets(30, 2, 13)}),
	}
}

// addRecord gives the joiner one merged record and emits what changed,
// counting the record if it answered a process late.
func (a *Agent) addRecord(ctx context.Context, now time.Time, rec auditlog.ExecRecord) {
	before := a.joiner.Stats().LateProcesses
	ups := a.joiner.AddRecord(now, rec)
	if a.joiner.Stats().LateProcesses > before {
		a.late.records.Inc()
		if rr := rec.RequestReceivedTimestamp; !rr.IsZero() {
			a.late.delay.Observe(max(0, now.Sub(rr).Seconds()))
		}
	}
	a.emit(ctx, now, ups)
}

// ProcessLister is the part of a store the restore reads.
type ProcessLister interface {
	ListProcesses(ctx context.Context, f store.ProcessFilter) ([]join.Process, string, error)
}

// DefaultRestoreMax bounds the rows read back at start.
const DefaultRestoreMax = 50_000

// WithRestore makes the agent read back, when it starts, the processes l
// stored unattributed within --late-window (newest first, at most max
// rows), and hand them to the joiner: a record that reaches the node after
// a restart still attributes them (join.Joiner.RestoreProcesses).
func WithRestore(l ProcessLister, max int) Option {
	return func(a *Agent) {
		if l != nil {
			a.restorer, a.restoreMax = l, max
			if max <= 0 {
				a.restoreMax = DefaultRestoreMax
			}
		}
	}
}

// restore reads the unattributed rows back and hands them to the joiner.
// A failure is logged: the agent runs on, without those processes.
func (a *Agent) restore(ctx context.Context) {
	if a.restorer == nil || a.cfg.Join.LateWindow <= 0 {
		return
	}
	now := a.now()
	rows, complete, err := a.readUnattributed(ctx, now.Add(-a.cfg.Join.LateWindow))
	if err != nil {
		a.restoreFailures.Inc()
		a.log.Error().Err(err).Int("read", len(rows)).Msg("restoring unattributed processes")
	}
	if !complete {
		a.restoreFailures.Inc()
		a.log.Warn().Int("max", a.restoreMax).Msg("restoring unattributed processes: more than the bound; the oldest stay as stored")
	}
	before := a.joiner.Stats().Restored
	a.emit(ctx, now, a.joiner.RestoreProcesses(now, rows))
	a.log.Info().Int("read", len(rows)).Int64("restored", a.joiner.Stats().Restored-before).
		Msg("restored unattributed processes for late records")
}

// readUnattributed pages through the unattributed rows started since,
// newest first; complete is false when the bound cut the read short.
func (a *Agent) readUnattributed(ctx context.Context, since time.Time) (rows []join.Process, complete bool, err error) {
	f := store.ProcessFilter{Unattributed: true, Since: since, Limit: 1000}
	for {
		page, next, err := a.restorer.ListProcesses(ctx, f)
		if err != nil {
			return rows, true, fmt.Errorf("listing unattributed processes: %w", err)
		}
		rows = append(rows, page...)
		if next == "" {
			return rows, true, nil
		}
		if len(rows) >= a.restoreMax {
			return rows, false, nil
		}
		f.Cursor = next
	}
}
