package elasticsearch

import (
	"fmt"
	"strings"
	"time"
)

// The store's documents live in time-partitioned indices, one per kind and
// period: <prefix>-processes-2026.11.29 holds the processes that started
// that day (UTC), and every later write of one process (its exit) goes to
// the index its start chose, because a document is always indexed whole
// with its start. Sessions are placed by the request's receipt, audit
// records by their stage time, alerts by their own time. Retention then
// drops whole indices, so its cost grows with the number of indices, never
// with the documents in them. Data streams are not used for these kinds:
// a data stream only appends, and a process or session is rewritten.
//
// <prefix>-<kind>-carried holds what retention kept from an index it
// dropped (a process still running, a session whose process is), and
// <prefix>-meta the layout every agent agrees on and the retention lease.

// kind is one kind of document.
type kind string

const (
	kindSessions  kind = "sessions"
	kindProcesses kind = "processes"
	kindAudit     kind = "audit"
	kindAlerts    kind = "alerts"
)

// kinds in the order retention walks them: processes before the sessions
// they keep, sessions before the audit records they keep.
var retentionOrder = []kind{kindProcesses, kindSessions, kindAudit, kindAlerts}

// carriedSuffix names the index of documents kept from dropped indices.
const carriedSuffix = "carried"

// Period bounds: an index per minute at the finest (tests), a week at the
// coarsest.
const (
	minPeriod     = time.Minute
	maxPeriod     = 7 * 24 * time.Hour
	defaultPeriod = 24 * time.Hour
)

// names are the indices, patterns and meta index of one prefix.
type names struct {
	prefix string
	period time.Duration
	// sessions, processes, audit and alerts are the read patterns: every
	// period's index, the carried one, and the single index (or, for
	// alerts, the data stream) of a store from before time partitioning.
	sessions, processes, audit, alerts string
	meta                               string
}

func namesFor(prefix string, period time.Duration) names {
	if period <= 0 {
		period = defaultPeriod
	}
	return names{
		prefix: prefix, period: period,
		sessions: prefix + "-sessions*", processes: prefix + "-processes*",
		audit: prefix + "-audit*", alerts: prefix + "-alerts*",
		meta: prefix + "-meta",
	}
}

// legacy is the single index (alerts: data stream) a kind had before time
// partitioning.
func (n names) legacy(k kind) string { return n.prefix + "-" + string(k) }

// carried is the index of documents retention kept from dropped indices.
func (n names) carried(k kind) string { return n.prefix + "-" + string(k) + "-" + carriedSuffix }

// templatePattern matches a kind's period and carried indices, not its
// legacy single index.
func (n names) templatePattern(k kind) string { return n.prefix + "-" + string(k) + "-*" }

// index names the period index of kind k that holds time t.
func (n names) index(k kind, t time.Time) string {
	if t.IsZero() {
		t = time.Unix(0, 0) // as ts writes it
	}
	return n.prefix + "-" + string(k) + "-" + periodName(periodStart(t, n.period), n.period)
}

// periodStart is the start of the period holding t, periods counted from
// the Unix epoch in UTC (whole days start at midnight UTC).
func periodStart(t time.Time, period time.Duration) time.Time {
	t = t.UTC()
	start := t.Truncate(period)
	if start.After(t) { // Truncate rounds toward the zero time, not -inf
		start = start.Add(-period)
	}
	return start
}

// periodName is a period's suffix: the day for whole days, down to the
// second otherwise, so that names sort by time.
func periodName(start time.Time, period time.Duration) string {
	if period%(24*time.Hour) == 0 {
		return start.Format("2006.01.02")
	}
	return start.Format("2006.01.02-150405")
}

// parsePeriodIndex reads the period start out of an index name of kind k,
// or reports false for any other index (carried, legacy, someone else's).
func (n names) parsePeriodIndex(k kind, name string) (time.Time, bool) {
	rest, ok := strings.CutPrefix(name, n.prefix+"-"+string(k)+"-")
	if !ok {
		return time.Time{}, false
	}
	layout := "2006.01.02-150405"
	if n.period%(24*time.Hour) == 0 {
		layout = "2006.01.02"
	}
	t, err := time.Parse(layout, rest)
	if err != nil || periodName(t, n.period) != rest {
		return time.Time{}, false
	}
	return t, true
}

// validPeriod reports whether p partitions time into whole indices: within
// bounds and dividing a day (or a whole number of days), so that period
// starts fall on the same instants for every agent.
func validPeriod(p time.Duration) error {
	switch {
	case p < minPeriod || p > maxPeriod:
		return fmt.Errorf("index period %s: want between %s and %s", p, minPeriod, maxPeriod)
	case p%time.Second != 0:
		return fmt.Errorf("index period %s: want whole seconds", p)
	case p < 24*time.Hour && (24*time.Hour)%p != 0:
		return fmt.Errorf("index period %s: want one that divides a day", p)
	case p > 24*time.Hour && p%(24*time.Hour) != 0:
		return fmt.Errorf("index period %s: want whole days above a day", p)
	}
	return nil
}
