package delivery

import (
	"time"

	"github.com/execid/correlator/pkg/store"
)

// A resolution (store.AlertResolved) is delivered as an event of its own
// under its alert's ID, the receivers' dedupe key. JSON sinks (file,
// webhook, the HEC event) carry status, resolvedAt and resolution as
// store.Alert encodes them; syslog adds them as SD-PARAMs and CEF as act,
// reason and start (formatSyslog, formatCEF). Its event time (the syslog
// TIMESTAMP, CEF rt, HEC time) is when it was resolved, so a search over
// recent events finds it; the alert's own time stays in the event.

// resolution reports whether a resolves an alert.
func resolution(a *store.Alert) bool { return a.Status == store.AlertResolved }

// eventTime is when the event a sink delivers for a happened: a
// resolution's ResolvedAt, else the alert's Time.
func eventTime(a *store.Alert) time.Time {
	if resolution(a) && !a.ResolvedAt.IsZero() {
		return a.ResolvedAt
	}
	return a.Time
}

// headline is the alert's message as a syslog MSG or a CEF Name shows it:
// a resolution says so, and why, before it.
func headline(a *store.Alert) string {
	switch {
	case !resolution(a):
		return a.Message
	case a.Resolution != "":
		return "resolved (" + a.Resolution + "): " + a.Message
	}
	return "resolved: " + a.Message
}

// timeField writes t as a syslog SD-PARAM or JSON time, "" for the zero
// time.
func timeField(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}
