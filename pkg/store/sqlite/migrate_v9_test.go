package sqlite

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/execid/correlator/pkg/store"
)

// TestMigrateFromV9: a version-9 file's alerts gain the status columns.
// They read back as raised, with every field they had; a resolution then
// resolves one of them in place (its rule, message, time and payload
// kept), leaves the other as raised, and retention still drops by the
// alert's time.
func TestMigrateFromV9(t *testing.T) {
	db, path := oldFile(t, 9, nil)
	for _, q := range []string{
		`INSERT INTO alerts (id, time, rule, severity, message, audit_id, process_id, payload)
			VALUES ('a1', 1000, 'no-audit-record', 'high', 'no record', 's1', 'p1', '{"k":1}')`,
		`INSERT INTO alerts (id, time, rule, severity, message) VALUES ('a2', 2000, 'shell', 'low', 'a shell')`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	var cols int
	if err := db.QueryRow(`SELECT count(*) FROM pragma_table_info('alerts') WHERE name IN ('status', 'resolved_at', 'resolution')`).
		Scan(&cols); err != nil || cols != 0 {
		t.Fatalf("the version-9 file has %d status columns, %v", cols, err)
	}
	db.Close()

	s := openMigrated(t, path)
	ctx := context.Background()
	raised1 := store.Alert{ID: "a1", Time: time.Unix(0, 1000).UTC(), Rule: "no-audit-record", Severity: "high",
		Message: "no record", AuditID: "s1", ProcessID: "p1", Payload: json.RawMessage(`{"k":1}`)}
	raised2 := store.Alert{ID: "a2", Time: time.Unix(0, 2000).UTC(), Rule: "shell", Severity: "low", Message: "a shell"}
	sameAlerts(t, "after the upgrade", listAlerts(t, s), []store.Alert{raised2, raised1})

	res := raised1
	res.Payload = json.RawMessage(`{"process":{"attribution":"audit_id"}}`)
	res.Status, res.ResolvedAt, res.Resolution = store.AlertResolved, base, "late_audit_record"
	if err := s.Write(ctx, store.Batch{Alerts: []store.Alert{res, raised1}}); err != nil {
		t.Fatal(err)
	}
	resolved := raised1
	resolved.Status, resolved.ResolvedAt, resolved.Resolution = store.AlertResolved, base, "late_audit_record"
	sameAlerts(t, "after the resolution", listAlerts(t, s), []store.Alert{raised2, resolved})

	d, err := s.DeleteOlderThan(ctx, time.Unix(0, 1500))
	if err != nil || d.Alerts != 1 {
		t.Fatalf("retention deleted %+v, %v; want the resolved alert", d, err)
	}
	sameAlerts(t, "after retention", listAlerts(t, s), []store.Alert{raised2})
}

func listAlerts(t *testing.T, s *Store) []store.Alert {
	t.Helper()
	got, next, err := s.ListAlerts(context.Background(), store.AlertFilter{})
	if err != nil || next != "" {
		t.Fatalf("ListAlerts: next %q, %v", next, err)
	}
	return got
}

func sameAlerts(t *testing.T, what string, got, want []store.Alert) {
	t.Helper()
	g, _ := json.Marshal(got)
	w, _ := json.Marshal(want)
	if string(g) != string(w) {
		t.Fatalf("%s:\n got %s\nwant %s", what, g, w)
	}
}
