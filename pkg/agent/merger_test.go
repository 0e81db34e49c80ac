package agent

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
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

// TestMergerByteBound: the agent's stage merger holds requests with large
// commands within MaxRecordBytes, measured as the joiner measures records,
// shedding the oldest, counted.
func TestMergerByteBound(t *testing.T) {
	cfg := Default()
	cfg.MaxRecordBytes = 256 << 10
	a, err := New(cfg, staticMeta{}, nopSink{}, zerolog.Nop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	parser := auditlog.NewParser(0)
	ctx := context.Background()
	a.handleAudit(ctx, auditBatch{evs: bigRequest(t, parser, testutil.RandomUUID(), 10), done: make(chan error, 1)})
	if st := a.merger.Stats(); st.Evicted != 0 || st.Bytes <= 0 || st.Bytes > 8<<10 {
		t.Fatalf("one small request: %+v", st)
	}
	for range 8 {
		a.handleAudit(ctx, auditBatch{evs: bigRequest(t, parser, testutil.RandomUUID(), 50<<10), done: make(chan error, 1)})
		if st := a.merger.Stats(); st.Bytes > cfg.MaxRecordBytes {
			t.Fatalf("%d bytes held past the bound", st.Bytes)
		}
	}
	if st := a.merger.Stats(); st.Evicted == 0 || int64(st.Records)+st.Evicted != 9 {
		t.Fatalf("%d held and %d shed of 9", st.Records, st.Evicted)
	}
}

// TestLateStageAfterMergerEviction: a session whose last stage comes after
// the merger shed its request keeps every stage in the joiner.
func TestLateStageAfterMergerEviction(t *testing.T) {
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
	if a.merger.Stats().Evicted == 0 {
		t.Fatal("the merger never shed the request")
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

// TestMergerIdleExported: a request whose stages are all in leaves the
// stage merger RecordDoneIdle after its last one, shown by the held gauge
// and the idle counter, while the joiner keeps the session; its first
// stage redelivered after that is stored with the session unchanged.
func TestMergerIdleExported(t *testing.T) {
	cfg := Default()
	cfg.ExpireEvery, cfg.RecordDoneIdle = 10*time.Millisecond, 50*time.Millisecond
	reg := prometheus.NewPedanticRegistry()
	a, err := New(cfg, staticMeta{}, nopSink{}, zerolog.Nop(), reg)
	if err != nil {
		t.Fatal(err)
	}
	parser := auditlog.NewParser(0)
	id := testutil.RandomUUID()
	evs := bigRequest(t, parser, id, 10)
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { defer close(ran); a.Run(ctx) }()
	defer func() { cancel(); <-ran }()
	if err := a.AuditSink()(ctx, evs); err != nil {
		t.Fatal(err)
	}
	metric := func(name, kind string) float64 {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				if mf.GetName() != name || (kind != "" && !slices.ContainsFunc(m.GetLabel(), func(l *dto.LabelPair) bool {
					return l.GetName() == "kind" && l.GetValue() == kind
				})) {
					continue
				}
				if g := m.GetGauge(); g != nil {
					return g.GetValue()
				}
				return m.GetCounter().GetValue()
			}
		}
		t.Fatalf("no %s{kind=%q}", name, kind)
		return 0
	}
	testutil.Eventually(t, "the merger lets the request go", func() bool {
		return metric("correlator_audit_merger_idle_total", "") == 1 && metric("correlator_join_held", "merger") == 0
	})
	if metric("correlator_join_held", "records") != 1 || metric("correlator_join_evicted_total", "merger") != 0 {
		t.Fatal("the joiner lost the request, or the merger's idle count as loss")
	}
	if err := a.AuditSink()(ctx, evs[:1]); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the redelivery is read", func() bool { return metric("correlator_join_held", "merger") == 1 })
	cancel()
	<-ran
	s, ok := a.joiner.Session(id)
	want := []string{auditlog.StageRequestReceived, auditlog.StageResponseStarted, auditlog.StageResponseComplete}
	if !ok || !slices.Equal(s.Stages, want) || s.Code != evs[2].ResponseStatus.Code || s.EndTimestamp.IsZero() {
		t.Fatalf("session after the redelivery: held %v stages %v code %d end %v", ok, s.Stages, s.Code, s.EndTimestamp)
	}
}
