package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/execid/correlator/pkg/store"
)

// resolution is the resolution of a: its ID, rule, severity, message and
// time, the process as it now is for payload, resolved at base+seconds.
func resolution(a store.Alert, seconds int, why string) store.Alert {
	r := a
	r.Payload = json.RawMessage(`{"process":{"attribution":"audit_id"}}`)
	r.Status, r.ResolvedAt, r.Resolution = store.AlertResolved, at(seconds), why
	return r
}

// resolved is a as stored once r resolved it: what a said, r's status.
func resolved(a, r store.Alert) store.Alert {
	a.Status, a.ResolvedAt, a.Resolution = r.Status, r.ResolvedAt, r.Resolution
	return a
}

func listAlerts(t *testing.T, s store.Backend, f store.AlertFilter) []store.Alert {
	t.Helper()
	got, _, err := s.ListAlerts(context.Background(), f)
	if err != nil {
		t.Fatalf("ListAlerts(%+v): %v", f, err)
	}
	return got
}

// testAlertResolutions: a resolution keeps the alert's row, and what the
// alert said, and sets its status; it is idempotent, a redelivery of the
// alert does not undo it, one of an alert the store does not hold is
// stored as given, and in one batch the rows apply in order.
func testAlertResolutions(t *testing.T, s store.Backend) {
	a1, a2 := alert("a1", "no-audit-record", 1), alert("a2", "shell", 2)
	write(t, s, store.Batch{Alerts: []store.Alert{a1, a2}})
	r1 := resolution(a1, 50, "late_audit_record")
	write(t, s, store.Batch{Alerts: []store.Alert{r1}})
	want := []store.Alert{a2, resolved(a1, r1)}
	sameJSON(t, "resolved in place", listAlerts(t, s, store.AlertFilter{}), want)

	write(t, s, store.Batch{Alerts: []store.Alert{r1}})
	write(t, s, store.Batch{Alerts: []store.Alert{a1, a1}})
	sameJSON(t, "resolution again, then the alert redelivered", listAlerts(t, s, store.AlertFilter{}), want)

	// Retention dropped the alert, or another node raised it.
	gone := resolution(alert("gone", "no-audit-record", 3), 60, "late_audit_record")
	// Raised then resolved in one batch ends resolved; resolved then
	// raised too (the raise is a redelivery).
	a4, a5 := alert("a4", "no-audit-record", 4), alert("a5", "no-audit-record", 5)
	r4, r5 := resolution(a4, 70, "late_audit_record"), resolution(a5, 80, "late_audit_record")
	write(t, s, store.Batch{Alerts: []store.Alert{gone, a4, r4, r5, a5}})
	want = []store.Alert{r5, resolved(a4, r4), gone, a2, resolved(a1, r1)}
	sameJSON(t, "stored as given, and in batch order", listAlerts(t, s, store.AlertFilter{}), want)

	// The filters read the alert's fields, which a resolution keeps.
	cases := []struct {
		f    store.AlertFilter
		want []string
	}{
		{store.AlertFilter{Rule: "no-audit-record"}, []string{"a5", "a4", "gone", "a1"}},
		{store.AlertFilter{ProcessID: "p-a1"}, []string{"a1"}},
		{store.AlertFilter{Since: at(1), Until: at(3)}, []string{"a2", "a1"}},
		{store.AlertFilter{Limit: 2}, []string{"a5", "a4", "gone", "a2", "a1"}},
	}
	for _, c := range cases {
		sameIDs(t, fmt.Sprintf("%+v", c.f), allAlerts(t, s, c.f), c.want)
	}
}

// testResolutionRetention: a resolved alert ages out by the alert's own
// time, like any alert.
func testResolutionRetention(t *testing.T, s store.Backend) {
	ctx := context.Background()
	old, recent := alert("old", "r", 10), alert("recent", "r", 600)
	write(t, s, store.Batch{Alerts: []store.Alert{old, recent}})
	write(t, s, store.Batch{Alerts: []store.Alert{resolution(old, 620, "late_audit_record"),
		resolution(recent, 630, "late_audit_record")}})
	d, err := s.DeleteOlderThan(ctx, at(100))
	if err != nil || d.Alerts != 1 {
		t.Fatalf("DeleteOlderThan = %+v, %v; want the old alert gone", d, err)
	}
	got := listAlerts(t, s, store.AlertFilter{})
	if len(got) != 1 || got[0].ID != "recent" || got[0].Status != store.AlertResolved || !got[0].ResolvedAt.Equal(base.Add(630*time.Second)) {
		t.Fatalf("alerts left: %+v", got)
	}
}
