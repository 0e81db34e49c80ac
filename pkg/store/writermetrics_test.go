package store

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/execid/correlator/pkg/join"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestWriterRowsExported: while commits fail, held rows beyond the bound
// are dropped and durable adds refused, each counted; writable drops to 0.
func TestWriterRowsExported(t *testing.T) {
	r := &recorder{}
	w := NewWriter(r, 100, time.Hour, WithMaxHeld(1), WithRetry(time.Hour, time.Hour))
	defer w.Close()
	ctx := context.Background()
	_ = w.Add(ctx, Batch{Processes: []join.Process{process("a", "x", 1), process("b", "x", 2)}})
	_ = w.Flush(ctx)
	r.mu.Lock()
	r.fail = errors.New("database or disk is full")
	r.mu.Unlock()
	_ = w.Add(ctx, Batch{Processes: []join.Process{process("c", "x", 3)}}) // held
	_ = w.Flush(ctx)
	_ = w.Add(ctx, Batch{Processes: []join.Process{process("d", "x", 4)}}) // beyond maxHeld
	done := make(chan error, 1)
	_ = w.AddDurable(ctx, Batch{AuditRecords: []AuditRecord{{AuditID: "e", Stage: "ResponseComplete"}}}, done)
	if err := <-done; !errors.Is(err, ErrUnavailable) {
		t.Fatalf("durable add while failing: %v, want ErrUnavailable", err)
	}
	want := `
# HELP correlator_store_commit_failures_total Store commits that failed (disk full, I/O error); the rows are held and retried with backoff.
# TYPE correlator_store_commit_failures_total counter
correlator_store_commit_failures_total 1
# HELP correlator_store_rows_total Rows the store writer handled, by outcome: committed; dropped (beyond the rows held while the store failed, or unwritable at shutdown); refused (durable audit evidence turned back while the store failed: its sender retries).
# TYPE correlator_store_rows_total counter
correlator_store_rows_total{outcome="committed"} 2
correlator_store_rows_total{outcome="dropped"} 1
correlator_store_rows_total{outcome="refused"} 1
# HELP correlator_store_writable 1 while the latest store commit succeeded, 0 while commits fail.
# TYPE correlator_store_writable gauge
correlator_store_writable 0
`
	if err := testutil.CollectAndCompare(NewWriterCollector(w), strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}
