package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/execid/correlator/internal/testutil"
	"github.com/execid/correlator/pkg/join"
)

// recorder is a BatchWriter that keeps every batch, failing while fail is
// set.
type recorder struct {
	mu      sync.Mutex
	batches []Batch
	fail    error
}

func (r *recorder) Write(_ context.Context, b Batch) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail != nil {
		return r.fail
	}
	// A BatchWriter must not keep the batch's slices: the writer reuses them.
	r.batches = append(r.batches, Batch{Sessions: slices.Clone(b.Sessions), Processes: slices.Clone(b.Processes),
		Exits: slices.Clone(b.Exits), AuditRecords: slices.Clone(b.AuditRecords), Alerts: slices.Clone(b.Alerts)})
	return nil
}

func (r *recorder) sizes() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []int
	for _, b := range r.batches {
		out = append(out, b.Len())
	}
	return out
}

func TestWriterBatchesBySize(t *testing.T) {
	var r recorder
	w := NewWriter(&r, 10, time.Hour)
	ctx := context.Background()
	for i := range 25 {
		if err := w.Add(ctx, Batch{Processes: []join.Process{process(fmt.Sprint(i), "a", i)}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(r.sizes()); got != "[10 10 5]" {
		t.Errorf("batch sizes %s, want [10 10 5]", got)
	}
	if st := w.Stats(); st.Batches != 3 || st.Rows != 25 || st.Dropped != 0 {
		t.Errorf("stats %+v", st)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Add(ctx, Batch{Processes: []join.Process{process("late", "a", 0)}}); !errors.Is(err, ErrClosed) {
		t.Errorf("Add after Close = %v, want ErrClosed", err)
	}
	if err := w.Close(); err != nil {
		t.Errorf("second Close = %v", err)
	}
}

func TestWriterCommitsAfterDelay(t *testing.T) {
	var r recorder
	committed := make(chan Batch, 1)
	w := NewWriter(&r, 1000, 20*time.Millisecond, WithCommitHook(func(b Batch, err error) { committed <- b }))
	defer w.Close()
	start := time.Now()
	w.Add(context.Background(), Batch{Sessions: []join.Session{session("a", "alice", 0)}})
	select {
	case b := <-committed:
		// A lower bound only: the commit may come late on a busy machine,
		// never before maxDelay.
		if b.Len() != 1 || time.Since(start) < 20*time.Millisecond {
			t.Errorf("committed %d rows after %s", b.Len(), time.Since(start))
		}
	case <-time.After(testutil.EventuallyBound): // only stops a hang
		t.Fatal("no commit after maxDelay")
	}
}

func TestWriterCollapsesKeys(t *testing.T) {
	var r recorder
	w := NewWriter(&r, 1000, time.Hour)
	ctx := context.Background()
	first := session("a", "alice", 0)
	second := first
	second.Stages = []string{"ResponseComplete"}
	w.Add(ctx, Batch{Sessions: []join.Session{first}, Processes: []join.Process{process("p", "", 0)}})
	w.Add(ctx, Batch{Sessions: []join.Session{second}, Processes: []join.Process{process("p", "a", 0)}})
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if len(r.batches) != 1 {
		t.Fatalf("%d batches", len(r.batches))
	}
	b := r.batches[0]
	if len(b.Sessions) != 1 || b.Sessions[0].Stages[0] != "ResponseComplete" ||
		len(b.Processes) != 1 || b.Processes[0].AuditID != "a" {
		t.Errorf("batch %+v", b)
	}
}

// TestWriterHoldsAndRecovers: a failed commit loses nothing within the
// bound: its rows are retried with backoff and land by themselves once the
// store takes writes again, with no Add or Flush to prompt it.
func TestWriterHoldsAndRecovers(t *testing.T) {
	r := recorder{fail: errors.New("database or disk is full")}
	w := NewWriter(&r, 1000, time.Hour, WithRetry(time.Millisecond, 20*time.Millisecond))
	defer w.Close()
	ctx := context.Background()
	w.Add(ctx, Batch{Processes: []join.Process{process("p", "a", 0)}})
	if err := w.Flush(ctx); err == nil || !errors.Is(err, r.fail) {
		t.Errorf("Flush = %v, want the commit error", err)
	}
	if err := w.Healthy(); !errors.Is(err, r.fail) {
		t.Errorf("Healthy while failing = %v", err)
	}
	testutil.Eventually(t, "the writer retried at least twice", func() bool { return w.Stats().Failures >= 3 })
	r.mu.Lock()
	r.fail = nil
	r.mu.Unlock()
	// The commit counts its rows just before it clears the health error:
	// wait for both.
	testutil.Eventually(t, "the held row committed", func() bool { return w.Stats().Rows == 1 && w.Healthy() == nil })
	if st := w.Stats(); st.Dropped != 0 || w.Healthy() != nil {
		t.Errorf("after recovery: stats %+v, healthy %v", st, w.Healthy())
	}
	if got := r.sizes(); len(got) != 1 || got[0] != 1 {
		t.Errorf("batches written %v, want one of one row", got)
	}
}

// TestWriterHeldFullTakesExits: a writer holding as many rows as it may
// still takes the exit of a process it holds (it only replaces its row),
// and drops, counting, a new process. Positive control: the new one is
// dropped, so the limit is reached.
func TestWriterHeldFullTakesExits(t *testing.T) {
	r := recorder{fail: errors.New("cluster down")}
	w := NewWriter(&r, 1000, time.Hour, WithRetry(time.Hour, time.Hour), WithMaxHeld(2))
	ctx := context.Background()
	w.Add(ctx, Batch{Processes: []join.Process{process("p", "a", 0), process("q", "a", 1)}})
	if err := w.Flush(ctx); err == nil {
		t.Fatal("Flush succeeded on a failing store")
	}
	exit := process("p", "a", 0)
	exit.Exit, exit.ExitCode = time.Unix(10, 0), new(int)
	w.Add(ctx, Batch{Exits: []join.Process{exit}})
	w.Add(ctx, Batch{Processes: []join.Process{process("r", "a", 2)}})
	testutil.Eventually(t, "the new process was dropped", func() bool { return w.Stats().Dropped >= 1 })
	r.mu.Lock()
	r.fail = nil
	r.mu.Unlock()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if st := w.Stats(); st.Dropped != 1 {
		t.Errorf("stats %+v, want only the new process dropped", st)
	}
	var exited bool
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, b := range r.batches {
		for pr := range b.AllProcesses() {
			if pr.ProcessID == "p" && !pr.Exit.IsZero() {
				exited = true
			}
		}
	}
	if !exited {
		t.Error("the held process's exit was not written")
	}
}

// TestWriterCloseCountsUnwritable: rows still failing at Close are dropped
// and counted, never silently.
func TestWriterCloseCountsUnwritable(t *testing.T) {
	r := recorder{fail: errors.New("disk full")}
	w := NewWriter(&r, 1000, time.Hour, WithRetry(time.Hour, time.Hour))
	w.Add(context.Background(), Batch{Processes: []join.Process{process("p", "a", 0), process("q", "a", 1)}})
	if err := w.Close(); !errors.Is(err, r.fail) {
		t.Errorf("Close = %v, want the commit error", err)
	}
	if st := w.Stats(); st.Dropped != 2 {
		t.Errorf("stats %+v, want 2 dropped", st)
	}
}

func TestWriterCloseFlushesAndConcurrentAdds(t *testing.T) {
	var r recorder
	w := NewWriter(&r, 100, time.Hour)
	ctx := context.Background()
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 250 {
				p := process(fmt.Sprintf("g%d-%d", g, i), "a", i)
				if err := w.Add(ctx, Batch{Processes: []join.Process{p}}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if n := sum(r.sizes()); n != 1000 {
		t.Errorf("%d processes written, want 1000", n)
	}
}

func TestWriterAddHonoursContext(t *testing.T) {
	block := make(chan struct{})
	w := NewWriter(blockingWriter(block), 1, time.Hour)
	defer func() { close(block); w.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	var err error
	for err == nil { // fill the queue behind the stuck commit
		err = w.Add(ctx, Batch{Processes: []join.Process{process("p", "a", 0)}})
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Add = %v, want deadline exceeded", err)
	}
}

type blockingWriter chan struct{}

func (b blockingWriter) Write(context.Context, Batch) error { <-b; return nil }

// TestWriterCommitsWhenIdle: with group commit, a lone row is committed
// without waiting for maxDelay (an hour here), and rows queued behind a
// slow commit share the next one.
func TestWriterCommitsWhenIdle(t *testing.T) {
	gate := make(chan struct{})
	r := &gatedRecorder{gate: gate, entered: make(chan struct{}, 16)}
	committed := make(chan Batch, 16)
	w := NewWriter(r, 1000, time.Hour, WithCommitWhenIdle(), WithCommitHook(func(b Batch, err error) { committed <- b }))
	defer w.Close()
	ctx := context.Background()
	w.Add(ctx, Batch{Sessions: []join.Session{session("a", "alice", 0)}})
	select {
	case <-r.entered:
	case <-time.After(testutil.EventuallyBound): // maxDelay is an hour: only idle commit gets here
		t.Fatal("a lone row was not committed while the queue was idle")
	}
	// The first commit is now blocked in Write; queue three more behind it.
	for _, id := range []string{"b", "c", "d"} {
		w.Add(ctx, Batch{Sessions: []join.Session{session(id, "bob", 0)}})
	}
	close(gate)
	var sizes []int
	for len(sizes) == 0 || sum(sizes) < 4 {
		select {
		case b := <-committed:
			sizes = append(sizes, b.Len())
		case <-time.After(testutil.EventuallyBound): // maxDelay is an hour
			t.Fatalf("commits %v: rows left waiting for maxDelay", sizes)
		}
	}
	if sizes[0] != 1 || len(sizes) > 3 {
		t.Errorf("commit sizes %v: want the lone first row alone, then the queued rows grouped", sizes)
	}
}

func sum(xs []int) int {
	n := 0
	for _, x := range xs {
		n += x
	}
	return n
}

// gatedRecorder blocks every Write until gate is closed.
type gatedRecorder struct {
	recorder
	gate    chan struct{}
	entered chan struct{}
}

func (g *gatedRecorder) Write(ctx context.Context, b Batch) error {
	g.entered <- struct{}{}
	<-g.gate
	return g.recorder.Write(ctx, b)
}

// TestWriterAddDurable: done hears nothing before the commit that wrote
// the batch, then nil; a commit that fails hands the error to every waiter
// of that batch.
func TestWriterAddDurable(t *testing.T) {
	var r recorder
	w := NewWriter(&r, 1000, time.Hour)
	defer w.Close()
	ctx := context.Background()
	done := make(chan error, 1)
	if err := w.AddDurable(ctx, Batch{AuditRecords: []AuditRecord{{AuditID: "a", Stage: "ResponseComplete"}}}, done); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		t.Fatalf("done before any commit: %v", err)
	default:
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil || len(r.sizes()) != 1 {
		t.Fatalf("after the commit: done = %v, %d batches written", err, len(r.sizes()))
	}
	if err := w.Healthy(); err != nil {
		t.Errorf("Healthy after a good commit = %v", err)
	}

	r.mu.Lock()
	r.fail = errors.New("disk full")
	r.mu.Unlock()
	d1, d2 := make(chan error, 1), make(chan error, 1)
	for _, d := range []chan error{d1, d2} {
		if err := w.AddDurable(ctx, Batch{AuditRecords: []AuditRecord{{AuditID: "b", Stage: "ResponseComplete"}}}, d); err != nil {
			t.Fatal(err)
		}
	}
	_ = w.Flush(ctx)
	if w.Healthy() == nil {
		t.Error("Healthy after a failed commit = nil")
	}
	for i, d := range []chan error{d1, d2} {
		if err := <-d; err == nil || !errors.Is(err, r.fail) {
			t.Errorf("waiter %d of a failed commit: %v, want the write error", i, err)
		}
	}

	r.mu.Lock()
	r.fail = nil
	r.mu.Unlock()
	if err := w.Add(ctx, Batch{AuditRecords: []AuditRecord{{AuditID: "c", Stage: "ResponseComplete"}}}); err != nil {
		t.Fatal(err)
	}
	_ = w.Flush(ctx)
	if err := w.Healthy(); err != nil {
		t.Errorf("Healthy after the store recovered = %v", err)
	}

	empty := make(chan error, 1)
	if err := w.AddDurable(ctx, Batch{}, empty); err != nil || <-empty != nil {
		t.Error("an empty batch is not durable at once")
	}
}

// TestWriterRecoveredCloseIsClean: a failure the writer recovered from
// lost nothing, so Close reports nothing; a failure it did not recover
// from is reported (TestWriterCloseCountsUnwritable).
func TestWriterRecoveredCloseIsClean(t *testing.T) {
	r := recorder{fail: errors.New("disk full")}
	w := NewWriter(&r, 1000, time.Millisecond, WithRetry(time.Millisecond, 10*time.Millisecond))
	w.Add(context.Background(), Batch{Processes: []join.Process{process("p", "a", 0)}})
	testutil.Eventually(t, "a failed commit", func() bool { return w.Stats().Failures > 0 })
	r.mu.Lock()
	r.fail = nil
	r.mu.Unlock()
	testutil.Eventually(t, "recovery", func() bool { return w.Stats().Rows == 1 })
	if err := w.Close(); err != nil {
		t.Errorf("Close after recovery = %v, want nil: nothing was lost", err)
	}
}

// TestWriterMinCommitGap: idle commits are spaced: the first row goes at
// once, and rows that trickle in behind it within the gap (an hour here)
// wait to share one commit (the Flush's) instead of one each.
func TestWriterMinCommitGap(t *testing.T) {
	committed := make(chan Batch, 16)
	w := NewWriter(&gatedRecorder{gate: closedGate(), entered: make(chan struct{}, 16)}, 1000, time.Hour,
		WithCommitWhenIdle(), WithMinCommitGap(time.Hour),
		WithCommitHook(func(b Batch, err error) { committed <- b }))
	defer w.Close()
	ctx := context.Background()
	next := func() Batch {
		t.Helper()
		select {
		case b := <-committed:
			return b
		case <-time.After(testutil.EventuallyBound):
			t.Fatal("rows left waiting for maxDelay (an hour)")
			return Batch{}
		}
	}
	w.Add(ctx, Batch{Sessions: []join.Session{session("a", "alice", 0)}})
	if b := next(); b.Len() != 1 {
		t.Fatalf("first commit: %d rows, want the lone row", b.Len())
	}
	for _, id := range []string{"b", "c", "d"} {
		w.Add(ctx, Batch{Sessions: []join.Session{session(id, "bob", 0)}})
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if b := next(); b.Len() != 3 {
		t.Errorf("second commit: %d rows, want the three that came within the gap", b.Len())
	}
}

func closedGate() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}

// The writer reuses a committed batch's slices for the next (no commit
// hook): each commit holds its own rows only, small batches (reused) and
// large ones (let go) alike.
func TestWriterReusedBatchHoldsOnlyItsRows(t *testing.T) {
	for _, n := range []int{2, reuseRows + 1} {
		var r recorder
		w := NewWriter(&r, 1<<20, time.Hour)
		ctx := context.Background()
		var first []join.Process
		for i := range n {
			first = append(first, process(fmt.Sprintf("p%d", i), "", 0))
		}
		w.Add(ctx, Batch{Processes: first})
		if err := w.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		w.Add(ctx, Batch{Processes: []join.Process{process("q", "a", 0)}})
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		if len(r.batches) != 2 || len(r.batches[0].Processes) != n {
			t.Fatalf("%d rows first: %d batches", n, len(r.batches))
		}
		if got := r.batches[1].Processes; len(got) != 1 || got[0].ProcessID != "q" || got[0].AuditID != "a" {
			t.Fatalf("%d rows first: the second batch holds %+v", n, got)
		}
	}
}
