package store

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestWriterRowsExported: rows a failed commit drops are counted in
// correlator_store_rows_total{outcome="dropped"}, beside the committed ones.
func TestWriterRowsExported(t *testing.T) {
	r := &recorder{}
	w := NewWriter(r, 100, time.Hour)
	defer w.Close()
	ctx := context.Background()
	_ = w.Add(ctx, Batch{Processes: []Process{process("a", "x", 1), process("b", "x", 2)}})
	_ = w.Flush(ctx)
	r.mu.Lock()
	r.fail = errors.New("database or disk is full")
	r.mu.Unlock()
	_ = w.Add(ctx, Batch{Processes: []Process{process("c", "x", 3)}})
	_ = w.Flush(ctx)
	want := `
# HELP correlator_store_rows_total Rows the store writer handled, by outcome: committed, or dropped after a commit failed its retries.
# TYPE correlator_store_rows_total counter
correlator_store_rows_total{outcome="committed"} 2
correlator_store_rows_total{outcome="dropped"} 1
`
	if err := testutil.CollectAndCompare(NewWriterCollector(w), strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}
