package agent

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"

	"github.com/execid/correlator/internal/testutil"
	"github.com/execid/correlator/pkg/auditlog"
	"github.com/execid/correlator/pkg/capture"
	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/store"
	"github.com/execid/correlator/pkg/store/sqlite"
	"github.com/execid/correlator/pkg/vocab"
)

// floodBatch is how many events one webhook POST carries (the apiserver's
// buffered backend sends up to 400).
const floodBatch = 400

// floodRequest is the i-th distinct exec of a flood: its own ID and
// command, a 403 when denied.
func floodRequest(i int, denied bool, at time.Time) testutil.ExecRequest {
	req := testutil.ExecRequest{AuditID: testutil.RandomUUID(), User: fmt.Sprintf("user-%d", i%50), Groups: []string{"dev"},
		Namespace: "shop", Pod: "web-0", Container: "app", Command: []string{"sh", "-c", fmt.Sprintf("echo %d", i)},
		Received: at, Duration: time.Second}
	if denied {
		req.Code = 403
	}
	return req
}

// flood pushes n distinct exec records through the agent's audit sink in
// webhook-sized batches, each parsed fresh as the webhook would; every
// denyEvery-th request is a 403. It returns the last allowed and the last
// denied ID.
func flood(tb testing.TB, a *Agent, n, denyEvery int, at time.Time) (allowed, denied string) {
	tb.Helper()
	parser := auditlog.NewParser(0)
	var evs []auditlog.Event
	send := func() {
		for {
			err := a.AuditSink()(context.Background(), evs)
			if err == nil {
				break
			}
			if !errors.Is(err, auditlog.ErrBusy) {
				tb.Fatal(err)
			}
			// Busy: come back once the queue has room, as the webhook's
			// sender does after its backoff.
			testutil.Eventually(tb, "the audit queue drained", func() bool {
				return len(a.audit) == 0 && a.auditBytes.Load() == 0
			})
		}
		evs = evs[:0]
	}
	for i := range n {
		refused := i%denyEvery == 0
		req := floodRequest(i, refused, at.Add(time.Duration(i)*time.Microsecond))
		if refused {
			denied = req.AuditID
		} else {
			allowed = req.AuditID
		}
		for _, line := range strings.SplitAfter(strings.TrimSpace(string(req.LogLines())), "\n") {
			evs = append(evs, parser.ParseLine([]byte(strings.TrimSpace(line)))...)
		}
		if len(evs) >= floodBatch {
			send()
		}
	}
	if len(evs) > 0 {
		send()
	}
	return allowed, denied
}

// heapInuse is the Go heap in use after a full collection.
func heapInuse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// BenchmarkExecFlood pushes N distinct exec records (one in ten denied)
// through the audit sink into the SQLite store, as a flood on `correlator
// run`'s webhook would, and reports the heap retained afterwards, in all
// and per record. One op is the whole flood, done once whatever b.N is.
func BenchmarkExecFlood(b *testing.B) {
	for _, n := range []int{100_000, 200_000} {
		b.Run(fmt.Sprintf("records=%d", n), func(b *testing.B) {
			st, err := sqlite.Open(filepath.Join(b.TempDir(), "c.db"), sqlite.Config{}, zerolog.Nop())
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			w := NewStoreWriter(st)
			defer w.Close()
			cfg := Default()
			a, err := New(cfg, staticMeta{}, w, zerolog.Nop(), nil)
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			ran := make(chan struct{})
			go func() { defer close(ran); a.Run(ctx) }()
			defer func() { cancel(); <-ran }()

			base := heapInuse()
			flood(b, a, n, 10, time.Now())
			if err := w.Flush(ctx); err != nil {
				b.Fatal(err)
			}
			heap := heapInuse()
			js := a.Stats() // the run loop is idle: nothing is queued
			b.ReportMetric(float64(heap)/(1<<20), "heap-MiB")
			b.ReportMetric(float64(int64(heap)-int64(base))/float64(n), "heap-B/record")
			b.ReportMetric(float64(rssBytes(b))/(1<<20), "RSS-MiB")
			b.ReportMetric(float64(js.Records), "join-records")
			b.ReportMetric(float64(js.EvictedRecords+js.EvictedDenied), "join-evicted")
		})
	}
}

// procSink keeps the process rows the agent writes; the flood's sessions
// are dropped, as if stored.
type procSink struct {
	mu    sync.Mutex
	procs map[string]join.Process
}

func (s *procSink) Add(_ context.Context, b store.Batch) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for p := range b.AllProcesses() {
		s.procs[p.ProcessID] = *p
	}
	return nil
}

func (s *procSink) get(id string) join.Process {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.procs[id]
}

// TestExecFloodBounded: 300,000 distinct exec records, one in ten denied,
// leave at most 128 MiB of heap behind with the shipped bounds (an
// unbounded agent kept over 4 KiB a record), every record shed is counted,
// and what is in use still attributes: a session whose process ran through
// the flood, the newest allowed record, and a replay of the newest denied
// one. Short mode floods a tenth with bounds a tenth.
func TestExecFloodBounded(t *testing.T) {
	n, scale := 300_000, 1
	if testing.Short() {
		n, scale = 30_000, 10
	}
	cfg := Default()
	cfg.MaxRecords /= scale
	cfg.MaxRecordBytes /= scale
	cfg.Join.MaxRecordBytes /= scale
	cfg.Join.MaxDeniedRecords /= scale
	// Twice what the bounds allow (56 MiB shipped), for what the estimates
	// leave out and the holes churn leaves in the heap, and 16 MiB for
	// what does not scale: 128 MiB with the shipped bounds.
	budget := uint64(2*(cfg.MaxRecordBytes+cfg.Join.MaxRecordBytes) + 16<<20)
	sink := &procSink{procs: map[string]join.Process{}}
	a, err := New(cfg, staticMeta{ctr: {ContainerID: ctr, Namespace: "shop", Pod: "web-0", Container: "app"}}, sink, zerolog.Nop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { defer close(ran); a.Run(ctx) }()
	defer func() { cancel(); <-ran }()

	at := time.Now()
	parser := auditlog.NewParser(0)
	live := testutil.RandomUUID()
	if err := a.AuditSink()(ctx, auditEvents(t, parser, live, at)); err != nil {
		t.Fatal(err)
	}
	root := rootEvent(0, live, at)
	if err := a.Process(ctx, root); err != nil {
		t.Fatal(err)
	}
	attributed := func(id string, want vocab.Attribution) func() bool {
		return func() bool { p := sink.get(id); return p.Attribution == want }
	}
	testutil.Eventually(t, "the live session's root is attributed", attributed(root.ProcessID, "audit_id"))

	base := heapInuse()
	allowed, denied := flood(t, a, n, 10, at)
	heap := heapInuse()
	t.Logf("%d records: heap %d MiB before, %d MiB after (%d B/record retained)",
		n, base>>20, heap>>20, (int64(heap)-int64(base))/int64(n))
	if heap > base+budget {
		t.Errorf("retained heap grew %d MiB, budget %d MiB", (heap-base)>>20, budget>>20)
	}

	child := rootEvent(1, live, at)
	child.ParentProcessID, child.Source, child.SessionRootID = root.ProcessID, vocab.SourceInherited, root.ProcessID
	newest := rootEvent(2, allowed, at)
	replay := rootEvent(3, denied, at)
	for _, ev := range []capture.Event{child, newest, replay} {
		if err := a.Process(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, "the live session's new child is attributed", attributed(child.ProcessID, "inherited"))
	testutil.Eventually(t, "the newest record attributes its root", attributed(newest.ProcessID, "audit_id"))
	testutil.Eventually(t, "the newest denied ID is flagged when replayed", func() bool {
		return strings.Contains(strings.Join(sink.get(replay.ProcessID).Flags, ","), "denied_exec")
	})
	testutil.Eventually(t, "the loss is counted", func() bool {
		s := a.stats.Load()
		return s != nil && s.join.EvictedRecords > 0 && s.join.EvictedDenied > 0 && s.merger.Evicted > 0
	})
	s := a.stats.Load()
	t.Logf("shed: %d records, %d denied, %d merger; held: %d records (%d KiB estimated), %d denied",
		s.join.EvictedRecords, s.join.EvictedDenied, s.merger.Evicted, s.join.Records, s.join.RecordBytes>>10, s.join.DeniedRecords)
}

// TestShedRecordComesBack: a record the joiner shed to stay within its
// bound is read back from the store when a process carries its ID, so the
// bound loses no attribution, only time.
func TestShedRecordComesBack(t *testing.T) {
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "c.db"), sqlite.Config{}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	w := store.NewWriter(st, 100, 10*time.Millisecond, store.WithCommitWhenIdle())
	cfg := Default()
	cfg.ExpireEvery = 10 * time.Millisecond
	cfg.Join.MaxRecordBytes = 64 << 10
	cfg.LookupDelay = 0
	a, err := New(cfg, staticMeta{ctr: {ContainerID: ctr, Namespace: "shop", Pod: "web-0", Container: "app"}}, w,
		zerolog.Nop(), nil, WithAuditLookup(NewStoredRecords(st), 2))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { defer close(ran); a.Run(ctx) }()
	defer func() { cancel(); <-ran; w.Close(); st.Close() }()

	at := time.Now()
	first := testutil.RandomUUID()
	if err := a.AuditSink()(ctx, auditEvents(t, auditlog.NewParser(0), first, at)); err != nil {
		t.Fatal(err)
	}
	flood(t, a, 500, 10, at)
	testutil.Eventually(t, "the first record is shed", func() bool {
		s := a.stats.Load()
		return s != nil && s.join.EvictedRecords > 100
	})
	root := rootEvent(0, first, at)
	if err := a.Process(ctx, root); err != nil {
		t.Fatal(err)
	}
	waitFor(t, w, func() bool {
		d, err := st.GetSession(ctx, first)
		return err == nil && len(d.Processes) == 1 && d.Processes[0].Attribution == "audit_id"
	})
	if n := promtest.ToFloat64(a.lookup.requests.WithLabelValues("found")); n != 1 {
		t.Errorf("%v lookups found a record, want the shed one", n)
	}
}
