package elasticsearch

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/execid/correlator/pkg/store"
)

var resolutionT0 = time.Date(2026, 3, 1, 12, 0, 0, 123456789, time.UTC)

// resolutionOf is the resolution of a, resolved at t0+seconds.
func resolutionOf(a store.Alert, seconds int) store.Alert {
	r := a
	r.Payload = json.RawMessage(`{"process":{"attribution":"audit_id"}}`)
	r.Status, r.Resolution = store.AlertResolved, "late_audit_record"
	r.ResolvedAt = resolutionT0.Add(time.Duration(seconds) * time.Second)
	return r
}

// alertDocs are the documents under prefix's alert indices whose event.id
// is id, by _id.
func alertDocs(t *testing.T, c *conn, prefix, id string) map[string]alertDoc {
	t.Helper()
	var res searchResult
	q := map[string]any{"query": map[string]any{"term": map[string]any{"event.id": id}}, "size": 10}
	if err := c.do(context.Background(), http.MethodPost, "/"+prefix+"-alerts*/_search",
		url.Values{"ignore_unavailable": {"true"}}, q, &res); err != nil {
		t.Fatal(err)
	}
	out := map[string]alertDoc{}
	for _, h := range res.Hits.Hits {
		var d alertDoc
		if err := json.Unmarshal(h.Source, &d); err != nil {
			t.Fatal(err)
		}
		out[h.ID] = d
	}
	return out
}

// TestAlertSinkResolution: the sink delivers a resolution after its alert
// onto the alert's own document (same _id and event.id, the alert's rule,
// message and payload kept, correlator.alert.status resolved), not as a
// duplicate refused by the create; a redelivery of either changes
// nothing; raised then resolved in one batch ends resolved; and the
// resolution of an alert never delivered is stored whole. The store on
// the prefix lists each alert once, resolved.
func TestAlertSinkResolution(t *testing.T) {
	ctx := context.Background()
	cfg := clusterConfig(t)
	sink, err := NewAlertSink(ctx, cfg, zerolog.Nop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	a := store.Alert{ID: "x1", Time: resolutionT0, Rule: "no-audit-record", Severity: "high", Message: "no record",
		AuditID: "s1", ProcessID: "p1", Payload: json.RawMessage(`{"process":{"flags":["no_audit_record"]}}`)}
	b := a
	b.ID, b.Time = "x2", resolutionT0.Add(time.Second)
	gone := resolutionOf(store.Alert{ID: "x3", Time: resolutionT0.Add(2 * time.Second), Rule: "no-audit-record",
		Severity: "high", Message: "dropped"}, 90)
	ra, rb := resolutionOf(a, 60), resolutionOf(b, 70)
	for i, batch := range [][]store.Alert{{a}, {ra}, {a, ra}, {b, rb}, {gone}} {
		if err := sink.Deliver(ctx, batch); err != nil {
			t.Fatalf("delivery %d: %v", i, err)
		}
	}

	docs := alertDocs(t, sink.c, cfg.IndexPrefix, "x1")
	d, ok := docs["x1"]
	if len(docs) != 1 || !ok {
		t.Fatalf("documents of x1: %v, want one, under its ID", docs)
	}
	if d.Event.ID != "x1" || d.Message != "no record" || d.Correlator.Payload != string(a.Payload) ||
		d.Correlator.Alert == nil || d.Correlator.Alert.Status != store.AlertResolved ||
		d.Correlator.Alert.Resolution != "late_audit_record" {
		t.Fatalf("x1's document: %+v", d)
	}

	s := openCluster(t, cfg)
	got, _, err := s.ListAlerts(ctx, store.AlertFilter{})
	if err != nil {
		t.Fatal(err)
	}
	resolved := func(a, r store.Alert) store.Alert {
		a.Status, a.ResolvedAt, a.Resolution = r.Status, r.ResolvedAt, r.Resolution
		return a
	}
	sameAlertsJSON(t, got, []store.Alert{gone, resolved(b, rb), resolved(a, ra)})
}

// TestAlertResolutionUpgrade: an alerts index created before the status
// fields (its strict mapping lacks correlator.alert) takes a resolution
// once a sink has opened on it, which puts the current mapping.
func TestAlertResolutionUpgrade(t *testing.T) {
	ctx := context.Background()
	cfg := clusterConfig(t)
	c, err := dial(cfg.withDefaults())
	if err != nil {
		t.Fatal(err)
	}
	ft, err := c.probeTypes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	old := alertMappings(ft)
	delete(old["properties"].(map[string]any)["correlator"].(map[string]any)["properties"].(map[string]any), "alert")
	a := store.Alert{ID: "x1", Time: resolutionT0, Rule: "no-audit-record", Severity: "high", Message: "no record"}
	index := namesFor(cfg.IndexPrefix, cfg.withDefaults().IndexPeriod).index(kindAlerts, a.Time)
	if err := c.put(ctx, "/"+index, map[string]any{"mappings": old}, ""); err != nil {
		t.Fatal(err)
	}
	if err := c.bulk(ctx, newBulkMetrics(nil, "i", "r"), []op{mustAlertOp(t, index, &a)}); err != nil {
		t.Fatal(err)
	}

	sink, err := NewAlertSink(ctx, cfg, zerolog.Nop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	r := resolutionOf(a, 60)
	if err := sink.Deliver(ctx, []store.Alert{r}); err != nil {
		t.Fatalf("resolution on the old index: %v", err)
	}
	got, _, err := openCluster(t, cfg).ListAlerts(ctx, store.AlertFilter{})
	if err != nil {
		t.Fatal(err)
	}
	want := a
	want.Status, want.ResolvedAt, want.Resolution = r.Status, r.ResolvedAt, r.Resolution
	sameAlertsJSON(t, got, []store.Alert{want})
}

// mustAlertOp is a's create into index.
func mustAlertOp(t *testing.T, index string, a *store.Alert) op {
	t.Helper()
	body, err := json.Marshal(alertToDoc(a))
	if err != nil {
		t.Fatal(err)
	}
	return op{index: index, action: "create", id: a.ID, what: "alert " + a.ID, body: body}
}

func sameAlertsJSON(t *testing.T, got, want []store.Alert) {
	t.Helper()
	g, _ := json.Marshal(got)
	w, _ := json.Marshal(want)
	if string(g) != string(w) {
		t.Fatalf("alerts:\n got %s\nwant %s", g, w)
	}
}
