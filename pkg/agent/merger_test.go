package agent

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/execid/correlator/internal/testutil"
	"github.com/execid/correlator/pkg/auditlog"
)

// bigRequest is an exec whose command fills a large URI.
func bigRequest(tb testing.TB, parser *auditlog.Parser, id string, size int) []auditlog.Event {
	req := testutil.ExecRequest{AuditID: id, User: "alice", Namespace: "shop", Pod: "web-0", Container: "app",
		Command: []string{"sh", "-c", strings.Repeat("x", size)}, Received: time.Now(), Duration: time.Second}
	var evs []auditlog.Event
	for _, line := range strings.SplitAfter(strings.TrimSpace(string(req.LogLines())), "\n") {
		evs = append(evs, parser.ParseLine([]byte(strings.TrimSpace(line)))...)
	}
	if len(evs) != 3 {
		tb.Fatalf("parsed %d events, want 3", len(evs))
	}
	return evs
}

// TestStageMergerByteBound: requests too large for the merger's byte bound
// make it start over, counted; below the bound it only counts.
func TestStageMergerByteBound(t *testing.T) {
	parser := auditlog.NewParser(0)
	m := newStageMerger(100, 256<<10)
	small := bigRequest(t, parser, testutil.RandomUUID(), 10)
	for _, ev := range small {
		m.add(ev)
	}
	if m.evicted() != 0 || m.bytes <= 0 || m.bytes > 8<<10 {
		t.Fatalf("one small request: %d bytes held, %d evicted", m.bytes, m.evicted())
	}
	for range 4 {
		for _, ev := range bigRequest(t, parser, testutil.RandomUUID(), 50<<10) {
			m.add(ev)
			if m.bytes > 256<<10 {
				t.Fatalf("%d bytes held past the bound", m.bytes)
			}
		}
	}
	// A request whose stages straddle a restart counts as shed, then held.
	if held := m.m.Stats().Records; m.evicted() == 0 || int64(held)+m.evicted() < 5 {
		t.Fatalf("%d held and %d shed of 5", held, m.evicted())
	}
}

// TestLateStageAfterMergerRestart: a session whose last stage comes after
// the merger started over keeps every stage in the joiner.
func TestLateStageAfterMergerRestart(t *testing.T) {
	cfg := Default()
	cfg.MaxRecordBytes = 128 << 10
	a, err := New(cfg, staticMeta{}, nopSink{}, zerolog.Nop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	parser := auditlog.NewParser(0)
	id := testutil.RandomUUID()
	evs := bigRequest(t, parser, id, 10)
	ctx := context.Background()
	a.handleAudit(ctx, auditBatch{evs: evs[:2], done: make(chan error, 1)})
	for range 4 {
		a.handleAudit(ctx, auditBatch{evs: bigRequest(t, parser, testutil.RandomUUID(), 50<<10), done: make(chan error, 1)})
	}
	if a.merger.evicted() == 0 {
		t.Fatal("the merger never started over")
	}
	a.handleAudit(ctx, auditBatch{evs: evs[2:], done: make(chan error, 1)})
	s, ok := a.joiner.Session(id)
	want := []string{auditlog.StageRequestReceived, auditlog.StageResponseStarted, auditlog.StageResponseComplete}
	if !ok || !slices.Equal(s.Stages, want) || s.User.Username != "alice" {
		t.Fatalf("session %+v held %v: want alice's, with stages %v", s, ok, want)
	}
}

// TestAuditQueueByteBound: past AuditQueueBytes the sink answers busy, so
// the webhook answers 429, while a batch alone is always taken.
func TestAuditQueueByteBound(t *testing.T) {
	cfg := Default()
	cfg.AuditQueueBytes = 64 << 10
	a, err := New(cfg, staticMeta{}, nopSink{}, zerolog.Nop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	parser := auditlog.NewParser(0)
	first := bigRequest(t, parser, testutil.RandomUUID(), 100<<10) // over the bound alone
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	accepted := make(chan error, 1)
	go func() { accepted <- a.AuditSink()(ctx, first) }()
	testutil.Eventually(t, "the first batch is queued", func() bool { return len(a.audit) == 1 })
	if err := a.AuditSink()(ctx, bigRequest(t, parser, testutil.RandomUUID(), 10)); !errors.Is(err, auditlog.ErrBusy) {
		t.Fatalf("second batch past the bound: %v, want busy", err)
	}
	ran := make(chan struct{})
	go func() { defer close(ran); a.Run(ctx) }()
	if err := <-accepted; err != nil {
		t.Fatalf("first batch: %v", err)
	}
	if err := a.AuditSink()(ctx, bigRequest(t, parser, testutil.RandomUUID(), 10)); err != nil {
		t.Fatalf("after the queue drained: %v", err)
	}
	cancel()
	<-ran
}
