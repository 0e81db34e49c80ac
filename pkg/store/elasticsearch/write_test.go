package elasticsearch

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"

	"github.com/execid/correlator/internal/esdouble"
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

func TestWriteRetriesRejectedItems(t *testing.T) {
	d := esdouble.New(t, esdouble.WithItemFailures(3, 429, "es_rejected_execution_exception"))
	s := openDouble(t, d, Config{})
	if err := s.Write(context.Background(), store.Batch{Processes: procs(30)}); err != nil {
		t.Fatalf("Write with every third item rejected: %v", err)
	}
	if n := d.DocCount("correlator-processes"); n != 30 {
		t.Fatalf("stored %d of 30", n)
	}
	if r := testutil.ToFloat64(s.metrics.items.WithLabelValues("retried")); r < 10 {
		t.Fatalf("retried = %v, want at least 10", r)
	}
}

func TestWriteRetriesRejectedRequests(t *testing.T) {
	d := esdouble.New(t)
	s := openDouble(t, d, Config{})
	d.FailBulkRequests(6, 429) // more than the transport's own 3 retries
	if err := s.Write(context.Background(), store.Batch{Processes: procs(5)}); err != nil {
		t.Fatalf("Write after rejected requests: %v", err)
	}
	if n := d.DocCount("correlator-processes"); n != 5 {
		t.Fatalf("stored %d of 5", n)
	}
}

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
	if n := d.DocCount("correlator-processes"); n != 6 {
		t.Fatalf("stored %d, want the 6 accepted (a batch is not atomic)", n)
	}
	if f := testutil.ToFloat64(s.metrics.items.WithLabelValues("failed")); f != 2 {
		t.Fatalf("failed = %v", f)
	}
}

func TestWriteGivesUp(t *testing.T) {
	d := esdouble.New(t)
	s := openDouble(t, d, Config{RetryMaxElapsed: 50 * time.Millisecond})
	d.SetItemFailures(1, 429, "es_rejected_execution_exception")
	err := s.Write(context.Background(), store.Batch{Processes: procs(2)})
	if err == nil || !strings.Contains(err.Error(), "gave up retrying") || !strings.Contains(err.Error(), "process p000") {
		t.Fatalf("Write = %v", err)
	}
}

func TestOpenIsIdempotentAndSecretsStayOut(t *testing.T) {
	d := esdouble.New(t)
	openDouble(t, d, Config{Retention: 72 * time.Hour})
	openDouble(t, d, Config{Retention: 72 * time.Hour})
	_, err := Open(context.Background(), Config{URLs: []string{"http://user:hunter2@127.0.0.1:1"}, APIKey: "c2VjcmV0OmtleQ=="}, zerolog.Nop(), nil)
	if err == nil || strings.Contains(err.Error(), "hunter2") || strings.Contains(err.Error(), "c2VjcmV0") {
		t.Fatalf("Open error leaks or is missing: %v", err)
	}
	_, err = Open(context.Background(), Config{URLs: []string{"http://127.0.0.1:1"}, APIKey: "c2VjcmV0OmtleQ==", RetryInitial: time.Millisecond}, zerolog.Nop(), nil)
	if err == nil || strings.Contains(err.Error(), "c2VjcmV0") {
		t.Fatalf("Open error leaks or is missing: %v", err)
	}
}

func TestAlertSink(t *testing.T) {
	d := esdouble.New(t)
	ctx := context.Background()
	sink, err := NewAlertSink(ctx, Config{URLs: []string{d.URL()}, Retention: 24 * time.Hour}, zerolog.Nop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if sink.Name() != "elasticsearch" {
		t.Fatal(sink.Name())
	}
	a := []store.Alert{{ID: "x1", Time: time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC), Rule: "shell", Severity: "high", Message: "m"},
		{ID: "x2", Time: time.Date(2026, 3, 1, 0, 0, 1, 0, time.UTC), Rule: "shell", Severity: "low"}}
	if err := sink.Deliver(ctx, a); err != nil {
		t.Fatal(err)
	}
	if err := sink.Deliver(ctx, a); err != nil {
		t.Fatalf("redelivery: %v", err)
	}
	if n := d.DocCount("correlator-alerts"); n != 2 {
		t.Fatalf("alerts stored = %d, want 2 (redelivery is idempotent)", n)
	}
	if dup := testutil.ToFloat64(sink.metrics.items.WithLabelValues("duplicate")); dup != 2 {
		t.Fatalf("duplicates = %v", dup)
	}
	// The store reads what the sink wrote.
	s := openDouble(t, d, Config{})
	got, _, err := s.ListAlerts(ctx, store.AlertFilter{Severity: "high"})
	if err != nil || len(got) != 1 || got[0].ID != "x1" {
		t.Fatalf("ListAlerts = %+v, %v", got, err)
	}
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
}
