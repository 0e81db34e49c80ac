package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/execid/correlator/internal/testutil"
	"github.com/execid/correlator/pkg/auditlog"
	"github.com/execid/correlator/pkg/capture"
	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/store"
	"github.com/execid/correlator/pkg/store/sqlite"
	"github.com/execid/correlator/pkg/vocab"
)

// commitClock records when each session's first attributed process was
// committed, from the writer's commit hook.
type commitClock struct {
	mu   sync.Mutex
	at   map[string]time.Time
	want int
	done chan struct{}
}

func newCommitClock(want int) *commitClock {
	return &commitClock{at: map[string]time.Time{}, want: want, done: make(chan struct{})}
}

func (c *commitClock) hook(b store.Batch, err error) {
	if err != nil {
		return
	}
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	for p := range b.AllProcesses() {
		if p.Attribution == "" || p.AuditID == "" {
			continue
		}
		if _, ok := c.at[p.AuditID]; !ok {
			c.at[p.AuditID] = now
			if len(c.at) == c.want {
				close(c.done)
			}
		}
	}
}

type benchPipeline struct {
	a      *Agent
	st     *sqlite.Store
	w      *store.Writer
	cancel context.CancelFunc
	done   chan struct{}
	// skew is added to the agent's clock, to let the pending TTL pass.
	skew atomic.Int64
}

func newBenchPipeline(b *testing.B, opts ...store.WriterOption) *benchPipeline {
	b.Helper()
	st, err := sqlite.Open(filepath.Join(b.TempDir(), "c.db"), sqlite.Config{}, zerolog.Nop())
	if err != nil {
		b.Fatal(err)
	}
	w := NewStoreWriter(st, opts...)
	cfg := Default()
	a, err := New(cfg, staticMeta{ctr: {ContainerID: ctr, Namespace: "shop", Pod: "web-0", Container: "app"}}, w, zerolog.Nop(), nil)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &benchPipeline{a: a, st: st, w: w, cancel: cancel, done: make(chan struct{})}
	a.now = func() time.Time { return time.Now().Add(time.Duration(p.skew.Load())) }
	go func() { defer close(p.done); a.Run(ctx) }()
	b.Cleanup(p.close)
	return p
}

func (p *benchPipeline) close() {
	p.cancel()
	<-p.done
	p.w.Close()
	p.st.Close()
}

func rootEvent(i int, id string, at time.Time) capture.Event {
	return capture.Event{Exec: capture.Exec{ProcessID: fmt.Sprintf("%d-1", 1000+i),
		ParentProcessID: "90-1", PID: uint32(1000 + i), PPID: 90, Argv: []string{"sh"}, Filename: "/bin/sh",
		ContainerID: ctr}, Kind: capture.KindExec, Time: at,

		AuditID: id, Source: vocab.SourceEnv}
}

// sendAudit retries while the agent's audit queue is full, as the webhook's
// sender does after a 429.
func sendAudit(b *testing.B, a *Agent, evs []auditlog.Event) {
	for {
		err := a.AuditSink()(context.Background(), evs)
		if err == nil {
			return
		}
		if !errors.Is(err, auditlog.ErrBusy) {
			b.Fatal(err)
		}
		time.Sleep(time.Millisecond)
	}
}

func auditEvents(b testing.TB, parser *auditlog.Parser, id string, at time.Time) []auditlog.Event {
	req := testutil.ExecRequest{AuditID: id, User: "alice", Namespace: "shop", Pod: "web-0", Container: "app",
		Command: []string{"sh"}, Received: at, Duration: time.Second}
	var evs []auditlog.Event
	for _, line := range strings.SplitAfter(strings.TrimSpace(string(req.LogLines())), "\n") {
		evs = append(evs, parser.ParseLine([]byte(strings.TrimSpace(line)))...)
	}
	if len(evs) != 3 {
		b.Fatalf("parsed %d audit events, want 3", len(evs))
	}
	return evs
}

// BenchmarkJoinLatency measures, per session, the time from the arrival of
// the second side (the audit record after the process, or the process
// after the record) to the commit of the attributed process row, through
// the agent and the SQLite writer with `correlator run`'s settings (group
// commit, batches of up to 1000 rows). Second sides arrive one per
// millisecond.
func BenchmarkJoinLatency(b *testing.B) {
	for _, order := range []string{"record-second", "process-second"} {
		b.Run(order, func(b *testing.B) {
			clock := newCommitClock(b.N)
			p := newBenchPipeline(b, store.WithCommitHook(clock.hook))
			ctx := context.Background()
			parser := auditlog.NewParser(0)
			at := time.Now()
			ids := make([]string, b.N)
			recs := make([][]auditlog.Event, b.N)
			for i := range ids {
				ids[i] = testutil.RandomUUID()
				recs[i] = auditEvents(b, parser, ids[i], at)
			}
			first := func(i int) error {
				if order == "record-second" {
					return p.a.Process(ctx, rootEvent(i, ids[i], at))
				}
				sendAudit(b, p.a, recs[i])
				return nil
			}
			second := func(i int) error {
				if order == "record-second" {
					sendAudit(b, p.a, recs[i])
					return nil
				}
				return p.a.Process(ctx, rootEvent(i, ids[i], at))
			}
			for i := range ids {
				if err := first(i); err != nil {
					b.Fatal(err)
				}
			}
			// The first sides joined and stored before timing: a record's
			// sendAudit returns once it is; processes are only queued.
			if order == "record-second" {
				p.waitStats(b, func(st join.Stats) bool { return st.ProcessesAdded >= int64(b.N) })
			}
			p.w.Flush(ctx)
			arrival := make([]time.Time, b.N)
			tick := time.NewTicker(time.Millisecond)
			b.ResetTimer()
			for i := range ids {
				<-tick.C
				arrival[i] = time.Now()
				if err := second(i); err != nil {
					b.Fatal(err)
				}
			}
			select {
			case <-clock.done:
			case <-time.After(30 * time.Second):
				b.Fatalf("only %d of %d sessions committed attributed", len(clock.at), b.N)
			}
			b.StopTimer()
			tick.Stop()
			lat := make([]time.Duration, b.N)
			clock.mu.Lock()
			for i, id := range ids {
				lat[i] = clock.at[id].Sub(arrival[i])
			}
			clock.mu.Unlock()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
		})
	}
}

// rssBytes reads the process's resident set from /proc/self/status.
func rssBytes(b *testing.B) uint64 { return statusBytes(b, "VmRSS:") }

// anonBytes reads the process's anonymous resident memory: its resident
// set less the store's mapped file (the writer maps it, and its pages count
// in VmRSS though the kernel may drop them at will).
func anonBytes(b *testing.B) uint64 { return statusBytes(b, "RssAnon:") }

// statusBytes reads field (in kB) from /proc/self/status.
func statusBytes(b *testing.B, field string) uint64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, field); ok {
			kb, err := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return kb << 10
		}
	}
	b.Fatalf("no %s in /proc/self/status", field)
	return 0
}

// BenchmarkLiveProcesses100k holds 100,000 live (never exited) session
// processes, 1,000 sessions of 100, in the agent, attributed and stored,
// and reports the process's RSS and Go heap afterwards. Then every process
// exits, the agent's clock skips past the pending TTL so the joiner lets
// them (and the idle records) go, and it reports RSS and heap again
// (exited-RSS-MiB, exited-heap-MiB), and RSS once the runtime has returned
// the freed pages (exited-released-RSS-MiB). One op is the whole 100k,
// done once whatever b.N is.
func BenchmarkLiveProcesses100k(b *testing.B) {
	const sessions, perSession = 1000, 100
	{
		clock := newCommitClock(sessions)
		var stored, exited sync.WaitGroup
		stored.Add(1)
		exited.Add(1)
		var rows, exits, once, onceExit = 0, 0, sync.Once{}, sync.Once{}
		var mu sync.Mutex
		hook := func(bt store.Batch, err error) {
			clock.hook(bt, err)
			if err != nil {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			for p := range bt.AllProcesses() {
				if p.Attribution != "" {
					rows++
				}
				if !p.Exit.IsZero() {
					exits++
				}
			}
			if rows >= sessions*perSession {
				once.Do(stored.Done)
			}
			if exits >= sessions*perSession {
				onceExit.Do(exited.Done)
			}
		}
		p := newBenchPipeline(b, store.WithCommitHook(hook))
		ctx := context.Background()
		parser := auditlog.NewParser(0)
		at := time.Now()
		for s := 0; s < sessions; s++ {
			id := testutil.RandomUUID()
			sendAudit(b, p.a, auditEvents(b, parser, id, at))
			root := rootEvent(s*perSession, id, at)
			if err := p.a.Process(ctx, root); err != nil {
				b.Fatal(err)
			}
			for c := 1; c < perSession; c++ {
				ev := rootEvent(s*perSession+c, id, at)
				ev.ParentProcessID, ev.Source, ev.SessionRootID = root.ProcessID, vocab.SourceInherited, root.ProcessID
				ev.Argv = []string{"sleep", "infinity"}
				if err := p.a.Process(ctx, ev); err != nil {
					b.Fatal(err)
				}
			}
		}
		stored.Wait()
		st := p.waitStats(b, func(st join.Stats) bool { return st.ProcessesAdded >= sessions*perSession })
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		b.ReportMetric(float64(rssBytes(b))/(1<<20), "RSS-MiB")
		b.ReportMetric(float64(anonBytes(b))/(1<<20), "anon-MiB")
		b.ReportMetric(float64(ms.HeapInuse)/(1<<20), "heap-MiB")
		b.ReportMetric(float64(st.Processes), "live-processes")
		if st.Processes < sessions*perSession {
			b.Fatalf("joiner holds %d processes, want %d", st.Processes, sessions*perSession)
		}

		// Every process exits; once the exits are stored, the clock skips
		// past the pending TTL (and the heuristic window, for the records).
		code := 0
		for i := range sessions * perSession {
			ev := capture.Event{Kind: capture.KindExit, Time: time.Now(), ExitCode: &code,
				Exec: capture.Exec{ProcessID: fmt.Sprintf("%d-1", 1000+i), PID: uint32(1000 + i), PPID: 90, ContainerID: ctr}}
			if err := p.a.Process(ctx, ev); err != nil {
				b.Fatal(err)
			}
		}
		exited.Wait()
		cfg := Default().Join
		p.skew.Store(int64(cfg.PendingTTL + cfg.HeuristicWindow + time.Minute))
		p.waitStats(b, func(st join.Stats) bool { return st.Processes == 0 && st.Records == 0 })
		if err := p.w.Flush(ctx); err != nil {
			b.Fatal(err)
		}
		runtime.GC()
		runtime.ReadMemStats(&ms)
		b.ReportMetric(float64(rssBytes(b))/(1<<20), "exited-RSS-MiB")
		b.ReportMetric(float64(ms.HeapInuse)/(1<<20), "exited-heap-MiB")
		// The agent handed the freed pages back itself (memoryRelease)
		// when the joiner let go; this is where RSS would settle anyway.
		debug.FreeOSMemory()
		b.ReportMetric(float64(rssBytes(b))/(1<<20), "exited-released-RSS-MiB")
		b.ReportMetric(float64(anonBytes(b))/(1<<20), "exited-released-anon-MiB")
	}
}

// waitStats waits until the joiner's counters, as the run loop publishes
// them each ExpireEvery, satisfy ok, and returns them.
func (p *benchPipeline) waitStats(b *testing.B, ok func(join.Stats) bool) join.Stats {
	deadline := time.Now().Add(time.Minute)
	for {
		if ls := p.a.stats.Load(); ls != nil && ok(ls.join) {
			return ls.join
		}
		if time.Now().After(deadline) {
			b.Fatalf("joiner stats never got there: %+v", p.a.stats.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
