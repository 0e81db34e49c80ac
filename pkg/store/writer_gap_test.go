package store

import (
	"context"
	"testing"
	"time"

	"github.com/execid/correlator/internal/testutil"
	"github.com/execid/correlator/pkg/join"
)

// TestWriterDurableGap: plain rows wait for the commit gap (an hour here)
// to share a commit, but a durable Add is committed without waiting for
// it, taking the plain rows queued before it along; a plain row alone
// after that keeps waiting until Flush. The positive control is the first
// row: the first commit has no gap to wait for.
func TestWriterDurableGap(t *testing.T) {
	committed := make(chan Batch, 16)
	w := NewWriter(&recorder{}, 1000, time.Hour, WithCommitWhenIdle(), WithMinCommitGap(time.Hour),
		WithDurableGap(time.Millisecond), WithCommitHook(func(b Batch, err error) { committed <- b }))
	defer w.Close()
	ctx := context.Background()
	next := func(what string) Batch {
		t.Helper()
		select {
		case b := <-committed:
			return b
		case <-time.After(testutil.EventuallyBound): // the gap and maxDelay are an hour
			t.Fatalf("%s: not committed", what)
			return Batch{}
		}
	}
	w.Add(ctx, Batch{Sessions: []join.Session{session("a", "alice", 0)}})
	if b := next("the first row"); b.Len() != 1 {
		t.Fatalf("first commit holds %d rows, want 1", b.Len())
	}
	w.Add(ctx, Batch{Sessions: []join.Session{session("b", "bob", 0)}})
	done := make(chan error, 1)
	if err := w.AddDurable(ctx, Batch{Sessions: []join.Session{session("c", "carol", 0)}}, done); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("durable add: %v", err)
		}
	case <-time.After(testutil.EventuallyBound):
		t.Fatal("a durable row waited for the plain rows' commit gap")
	}
	if b := next("the durable row"); b.Len() != 2 {
		t.Errorf("the durable row's commit holds %d rows, want 2 (the plain row queued before it, and it)", b.Len())
	}
	w.Add(ctx, Batch{Sessions: []join.Session{session("d", "dave", 0)}})
	if n := w.Stats().Batches; n != 2 {
		t.Errorf("%d commits before Flush, want 2", n)
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if b := next("the last plain row, at Flush"); b.Len() != 1 {
		t.Errorf("Flush committed %d rows, want 1", b.Len())
	}
}
