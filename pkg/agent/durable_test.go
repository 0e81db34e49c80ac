package agent

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/execid/correlator/internal/testutil"
	"github.com/execid/correlator/pkg/auditlog"
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
