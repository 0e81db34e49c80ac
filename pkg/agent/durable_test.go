package agent

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/execid/correlator/internal/testutil"
	"github.com/execid/correlator/pkg/auditlog"
	"github.com/execid/correlator/pkg/capture"
	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/store"
)

// gatedStore is a BatchWriter whose writes wait for a release and can fail.
type gatedStore struct {
	started chan struct{}
	release chan error
}

func (g *gatedStore) Write(ctx context.Context, b store.Batch) error {
	if len(b.AuditRecords) == 0 {
		return nil // the joiner's own rows: not what this test gates
	}
	g.started <- struct{}{}
	return <-g.release
}

func execEvents(t *testing.T) []auditlog.Event {
	t.Helper()
	req := testutil.ExecRequest{AuditID: testutil.RandomUUID(), User: "alice", Namespace: "shop", Pod: "web-0",
		Container: "app", Command: []string{"sh"}, Received: time.Now(), Duration: time.Second}
	p := auditlog.NewParser(0)
	var evs []auditlog.Event
	for _, line := range bytes.Split(bytes.TrimSpace(req.LogLines()), []byte("\n")) {
		evs = append(evs, p.ParseLine(line)...)
	}
	return evs
}

// TestAuditSinkAcknowledgesOnlyDurable: the sink behind the webhook and the
// file tailer returns only after the stages are committed, and returns the
// commit's error when they could not be: kube-apiserver never resends what
// it got a 2xx for, and the tailer never checkpoints past it.
func TestAuditSinkAcknowledgesOnlyDurable(t *testing.T) {
	g := &gatedStore{started: make(chan struct{}, 8), release: make(chan error, 8)}
	w := store.NewWriter(g, 100, 10*time.Millisecond, store.WithCommitWhenIdle())
	a, err := New(Default(), staticMeta{}, w, zerolog.Nop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { defer close(ran); a.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-ran; close(g.release); w.Close() })

	sink := a.AuditSink()
	res := make(chan error, 1)
	go func() { res <- sink(context.Background(), execEvents(t)) }()
	<-g.started // the commit is under way, not finished
	select {
	case err := <-res:
		t.Fatalf("sink returned %v before its stages were committed", err)
	default:
	}
	g.release <- nil
	if err := <-res; err != nil {
		t.Fatalf("sink after the commit: %v", err)
	}

	// A commit that fails (after the writer's retries) is not acknowledged.
	go func() { res <- sink(context.Background(), execEvents(t)) }()
	for range 3 {
		<-g.started
		g.release <- errors.New("database or disk is full")
	}
	if err := <-res; err == nil {
		t.Fatal("sink acknowledged stages whose commit failed")
	}
}

// failingStore fails every write while fail is set and keeps the audit
// records it took.
type failingStore struct {
	mu      sync.Mutex
	fail    bool
	records []store.AuditRecord
}

func (f *failingStore) Write(_ context.Context, b store.Batch) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail {
		return errors.New("database or disk is full")
	}
	f.records = append(f.records, b.AuditRecords...)
	return nil
}

func (f *failingStore) set(fail bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail = fail
}

func (f *failingStore) held(id string) (n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, r := range f.records {
		if r.AuditID == id {
			n++
		}
	}
	return n
}

// TestAuditSinkRedeliveryAfterRefusal: the merger has seen a batch whose
// commit was refused; kube-apiserver then resends it. The resend must be
// stored before it is acknowledged, not waved through as a duplicate.
func TestAuditSinkRedeliveryAfterRefusal(t *testing.T) {
	st := &failingStore{fail: true}
	w := store.NewWriter(st, 100, 10*time.Millisecond, store.WithCommitWhenIdle(), store.WithRetry(time.Millisecond, 10*time.Millisecond))
	a, err := New(Default(), staticMeta{}, w, zerolog.Nop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { defer close(ran); a.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-ran; w.Close() })

	// The store is already failing, so the batch is refused at the door
	// and never held for the writer's retries.
	w.Add(context.Background(), store.Batch{Processes: []join.Process{{Exec: capture.Exec{ProcessID: "1-1"}}}})
	testutil.Eventually(t, "the writer failing", func() bool { return w.Healthy() != nil })
	sink := a.AuditSink()
	evs := execEvents(t)
	id := evs[0].AuditID
	if err := sink(context.Background(), evs); err == nil {
		t.Fatal("sink acknowledged a batch the store refused")
	}
	st.set(false)
	testutil.Eventually(t, "the writer recovered", func() bool { return w.Healthy() == nil })
	if err := sink(context.Background(), evs); err != nil {
		t.Fatalf("the resend after recovery: %v", err)
	}
	if n := st.held(id); n < len(evs) {
		t.Fatalf("acknowledged resend: %d of %d stages stored", n, len(evs))
	}
}
