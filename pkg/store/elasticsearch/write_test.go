package elasticsearch

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"

	"github.com/execid/correlator/internal/esdouble"
	itest "github.com/execid/correlator/internal/testutil"
	"github.com/execid/correlator/pkg/capture"
	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/store"
	"github.com/execid/correlator/pkg/vocab"
)

func procs(n int) []join.Process {
	out := make([]join.Process, n)
	for i := range out {
		out[i] = join.Process{
			Exec: capture.Exec{ProcessID: fmt.Sprintf("p%03d", i), PID: uint32(i), Filename: "/bin/sh",
				Argv: []string{"sh", "-c", "true"}},
			Start: time.Date(2026, 3, 1, 0, 0, i, 0, time.UTC), Attribution: vocab.AttributionAuditID, AuditID: "s1"}
	}
	return out
}

// processesIndex is the index procs' processes go to (they start on one
// day).
func processesIndex(s *Store) string { return s.n.index(kindProcesses, procs(1)[0].Start) }

// TestWriteRetriesRejectedItems runs on the double: a real cluster
// rejects bulk items with 429 only under a load a test cannot make on
// demand.
func TestWriteRetriesRejectedItems(t *testing.T) {
	d := esdouble.New(t, esdouble.WithItemFailures(3, 429, "es_rejected_execution_exception"))
	s := openDouble(t, d, Config{})
	if err := s.Write(context.Background(), store.Batch{Processes: procs(30)}); err != nil {
		t.Fatalf("Write with every third item rejected: %v", err)
	}
	if n := d.DocCount(processesIndex(s)); n != 30 {
		t.Fatalf("stored %d of 30", n)
	}
	if r := testutil.ToFloat64(s.metrics.bulk.items.WithLabelValues("retried")); r < 10 {
		t.Fatalf("retried = %v, want at least 10", r)
	}
}

// TestWriteRetriesRejectedRequests runs on the double: a real cluster
// rejects whole bulk requests with 429 only under load.
func TestWriteRetriesRejectedRequests(t *testing.T) {
	d := esdouble.New(t)
	s := openDouble(t, d, Config{})
	d.FailBulkRequests(6, 429) // more than the transport's own 3 retries
	if err := s.Write(context.Background(), store.Batch{Processes: procs(5)}); err != nil {
		t.Fatalf("Write after rejected requests: %v", err)
	}
	if n := d.DocCount(processesIndex(s)); n != 5 {
		t.Fatalf("stored %d of 5", n)
	}
}

// TestWriteNamesRefusedItems runs on the double: the store's strict
// mappings leave no document it writes that a real cluster would refuse
// (400), so the refusal is injected.
func TestWriteNamesRefusedItems(t *testing.T) {
	d := esdouble.New(t, esdouble.WithItemFailures(4, 400, "mapper_parsing_exception"))
	s := openDouble(t, d, Config{})
	err := s.Write(context.Background(), store.Batch{Processes: procs(8)})
	if err == nil {
		t.Fatal("Write with refused items succeeded")
	}
	for _, want := range []string{"2 of 8 refused", "process p003", "process p007", "mapper_parsing_exception"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if n := d.DocCount(processesIndex(s)); n != 6 {
		t.Fatalf("stored %d, want the 6 accepted (a batch is not atomic)", n)
	}
	if f := testutil.ToFloat64(s.metrics.bulk.items.WithLabelValues("failed")); f != 2 {
		t.Fatalf("failed = %v", f)
	}
}

// TestWriteGivesUp runs on the double: it needs every item rejected with
// 429 until the store gives up, which a real cluster does not do on demand.
func TestWriteGivesUp(t *testing.T) {
	d := esdouble.New(t)
	s := openDouble(t, d, Config{RetryMaxElapsed: 50 * time.Millisecond})
	d.SetItemFailures(1, 429, "es_rejected_execution_exception")
	err := s.Write(context.Background(), store.Batch{Processes: procs(2)})
	if err == nil || !strings.Contains(err.Error(), "gave up retrying") || !strings.Contains(err.Error(), "process p000") {
		t.Fatalf("Write = %v", err)
	}
}

// TestOpenIsIdempotentAndSecretsStayOut: Open installs over what an Open
// before it installed, on the real cluster; a failing Open names no
// credential.
func TestOpenIsIdempotentAndSecretsStayOut(t *testing.T) {
	cfg := clusterConfig(t)
	cfg.Retention = 72 * time.Hour
	openCluster(t, cfg)
	s := openCluster(t, cfg)
	if err := s.Write(context.Background(), store.Batch{Processes: procs(3)}); err != nil {
		t.Fatalf("Write after a second Open: %v", err)
	}
	_, err := Open(context.Background(), Config{URLs: []string{"http://user:hunter2@127.0.0.1:1"}, APIKey: "c2VjcmV0OmtleQ=="}, zerolog.Nop(), nil)
	if err == nil || strings.Contains(err.Error(), "hunter2") || strings.Contains(err.Error(), "c2VjcmV0") {
		t.Fatalf("Open error leaks or is missing: %v", err)
	}
	_, err = Open(context.Background(), Config{URLs: []string{"http://127.0.0.1:1"}, APIKey: "c2VjcmV0OmtleQ==", RetryInitial: time.Millisecond}, zerolog.Nop(), nil)
	if err == nil || strings.Contains(err.Error(), "c2VjcmV0") {
		t.Fatalf("Open error leaks or is missing: %v", err)
	}
}

// alertsLifecycle is the ILM policy the alerts template of cfg's prefix
// names ("" for none), whether its settings are nested (as a cluster
// answers) or dotted (as they were put).
func alertsLifecycle(t *testing.T, c *conn, prefix string) string {
	t.Helper()
	name := prefix + "-" + string(kindAlerts) + "-period"
	var res struct {
		IndexTemplates []struct {
			IndexTemplate struct {
				Template struct {
					Settings map[string]any `json:"settings"`
				} `json:"template"`
			} `json:"index_template"`
		} `json:"index_templates"`
	}
	if err := c.do(context.Background(), http.MethodGet, "/_index_template/"+name, nil, nil, &res); err != nil || len(res.IndexTemplates) != 1 {
		t.Fatalf("reading index template %s: %v, %+v", name, err, res)
	}
	set := res.IndexTemplates[0].IndexTemplate.Template.Settings
	if v, ok := set["index.lifecycle.name"].(string); ok {
		return v
	}
	idx, _ := set["index"].(map[string]any)
	lc, _ := idx["lifecycle"].(map[string]any)
	v, _ := lc["name"].(string)
	return v
}

// deliverTwice delivers two alerts twice and checks the second delivery
// was idempotent: two documents, counted as duplicates.
func deliverTwice(t *testing.T, sink *AlertSink) []store.Alert {
	t.Helper()
	ctx := context.Background()
	a := []store.Alert{{ID: "x1", Time: time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC), Rule: "shell", Severity: "high", Message: "m"},
		{ID: "x2", Time: time.Date(2026, 3, 1, 0, 0, 1, 0, time.UTC), Rule: "shell", Severity: "low"}}
	if err := sink.Deliver(ctx, a); err != nil {
		t.Fatal(err)
	}
	if err := sink.Deliver(ctx, a); err != nil {
		t.Fatalf("redelivery: %v", err)
	}
	if dup := testutil.ToFloat64(sink.metrics.items.WithLabelValues("duplicate")); dup != 2 {
		t.Fatalf("duplicates = %v", dup)
	}
	return a
}

// TestAlertSink delivers to the real cluster, which has no ILM: given a
// retention, the sink installs no policy (the alerts template names none)
// and delivers all the same; the store on the prefix reads the alerts.
func TestAlertSink(t *testing.T) {
	ctx := context.Background()
	cfg := clusterConfig(t)
	sinkCfg := cfg
	sinkCfg.Retention = 24 * time.Hour
	sinkCfg.RetentionMode = RetentionOff // TestAlertSinkRetention runs the passes
	sink, err := NewAlertSink(ctx, sinkCfg, zerolog.Nop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if sink.Name() != "elasticsearch" {
		t.Fatal(sink.Name())
	}
	a := deliverTwice(t, sink)
	if sink.c.hasILM(ctx) {
		t.Fatal("the test cluster has ILM: this test means to check a cluster without it")
	}
	if p := alertsLifecycle(t, sink.c, cfg.IndexPrefix); p != "" {
		t.Errorf("alerts template names ILM policy %q on a cluster without ILM", p)
	}
	// The store reads what the sink wrote: each alert once.
	s := openCluster(t, cfg)
	got, _, err := s.ListAlerts(ctx, store.AlertFilter{})
	if err != nil || len(got) != len(a) {
		t.Fatalf("ListAlerts = %+v, %v; want %d (redelivery is idempotent)", got, err, len(a))
	}
	got, _, err = s.ListAlerts(ctx, store.AlertFilter{Severity: "high"})
	if err != nil || len(got) != 1 || got[0].ID != "x1" {
		t.Fatalf("ListAlerts(high) = %+v, %v", got, err)
	}
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestAlertSinkRetention: an alert sink on a cluster without ILM (and a
// store elsewhere) drops alert indices older than its retention itself,
// under a lease: alerts from March go, today's stay.
func TestAlertSinkRetention(t *testing.T) {
	ctx := context.Background()
	cfg := clusterConfig(t)
	quiet := cfg
	quiet.RetentionMode = RetentionOff
	writer, err := NewAlertSink(ctx, quiet, zerolog.Nop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	old := deliverTwice(t, writer)
	fresh := store.Alert{ID: "now", Time: time.Now(), Rule: "shell", Severity: "low"}
	if err := writer.Deliver(ctx, []store.Alert{fresh}); err != nil {
		t.Fatal(err)
	}
	s := openCluster(t, cfg)
	if got, _, err := s.ListAlerts(ctx, store.AlertFilter{}); err != nil || len(got) != len(old)+1 {
		t.Fatalf("before retention: %d alerts, %v (positive control)", len(got), err)
	}
	cfg.Retention = 24 * time.Hour
	reg := prometheus.NewRegistry()
	sink, err := NewAlertSink(ctx, cfg, zerolog.Nop(), reg)
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	itest.Eventually(t, "the sink's retention dropped March's alerts", func() bool {
		got, _, err := s.ListAlerts(ctx, store.AlertFilter{})
		return err == nil && len(got) == 1 && got[0].ID == "now" && sinkPassesRan(t, reg) > 0
	})
	if ran := sinkPassesRan(t, reg); ran != 1 {
		t.Errorf("alert sink retention passes ran = %v, want 1", ran)
	}
}

// sinkPassesRan reads correlator_es_alert_sink_retention_passes_total{result="ran"}.
func sinkPassesRan(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "correlator_es_alert_sink_retention_passes_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" && l.GetValue() == "ran" {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatal("no correlator_es_alert_sink_retention_passes_total{result=ran}")
	return 0
}

// TestAlertSinkILMPolicy runs on the double because it has ILM, which the
// real cluster (Elastic's integ-test distribution) lacks: given a
// retention, the sink installs a delete policy of that age and names it in
// the alerts template; without one, it installs none.
func TestAlertSinkILMPolicy(t *testing.T) {
	ctx := context.Background()
	d := esdouble.New(t)
	sink, err := NewAlertSink(ctx, Config{URLs: []string{d.URL()}, IndexPrefix: "kept", Retention: 36 * time.Hour}, zerolog.Nop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var pol map[string]struct {
		Policy struct {
			Phases map[string]struct {
				MinAge  string         `json:"min_age"`
				Actions map[string]any `json:"actions"`
			} `json:"phases"`
		} `json:"policy"`
	}
	if err := sink.c.do(ctx, http.MethodGet, "/_ilm/policy/kept-alerts", nil, nil, &pol); err != nil {
		t.Fatalf("reading the alerts policy: %v", err)
	}
	del, ok := pol["kept-alerts"].Policy.Phases["delete"]
	if _, deletes := del.Actions["delete"]; !ok || del.MinAge != "129600s" || !deletes {
		t.Fatalf("alerts policy = %+v, want a delete phase at 129600s", pol)
	}
	if p := alertsLifecycle(t, sink.c, "kept"); p != "kept-alerts" {
		t.Fatalf("alerts template names policy %q, want kept-alerts", p)
	}
	deliverTwice(t, sink)
	if n := d.DocCount(sink.n.index(kindAlerts, time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC))); n != 2 {
		t.Fatalf("alerts stored = %d, want 2", n)
	}

	// Without a retention there is nothing to delete by.
	other, err := NewAlertSink(ctx, Config{URLs: []string{d.URL()}, IndexPrefix: "forever"}, zerolog.Nop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := other.c.do(ctx, http.MethodGet, "/_ilm/policy/forever-alerts", nil, nil, nil); err == nil {
		t.Error("a sink without retention installed an ILM policy")
	}
	if p := alertsLifecycle(t, other.c, "forever"); p != "" {
		t.Errorf("alerts template of a sink without retention names policy %q", p)
	}
}
