package agent

import (
	"context"
	"database/sql"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"
	_ "modernc.org/sqlite"

	"github.com/execid/correlator/internal/testutil"
	"github.com/execid/correlator/pkg/capture"
	"github.com/execid/correlator/pkg/store/sqlite"
)

// BenchmarkEndToEnd measures exec events per second from the ring buffer
// to a stored row: a burst of execs is queued in the kernel's ring buffer
// with the consumer stopped, then the timer runs from starting the
// consumer until every exec the probe delivered is a committed SQLite row
// (the agent, the joiner and the writer as `correlator run` wires them).
// Loss is reported: ring-buffer drops, and delivered execs with no row.
func BenchmarkEndToEnd(b *testing.B) {
	testutil.RequireRoot(b)
	// An exec and its exit take about 3.5 KiB of ring together: 4,000 fit
	// the 16 MiB ring with room for the rest of the host.
	const burst = 4000
	env := []string{"PATH=/bin:/usr/bin", "KUBERNETES_EXEC_AUDIT_ID=" + testutil.RandomUUID()}
	var events, drops, missing int64
	var elapsed time.Duration
	for n := 0; n < b.N; n++ {
		b.StopTimer()
		cfg := capture.Default()
		cfg.PinPath = ""
		probe, err := capture.Load(cfg, zerolog.Nop())
		if err != nil {
			b.Fatal(err)
		}
		if err := probe.Attach(); err != nil {
			b.Fatal(err)
		}
		before, err := probe.Stats()
		if err != nil {
			b.Fatal(err)
		}
		var wg sync.WaitGroup
		for w := 0; w < 2; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := 0; j < burst/2; j++ {
					pid, err := syscall.ForkExec("/bin/true", []string{"true"}, &syscall.ProcAttr{Env: env})
					if err != nil {
						b.Error(err)
						return
					}
					var ws syscall.WaitStatus
					syscall.Wait4(pid, &ws, 0, nil)
				}
			}()
		}
		wg.Wait()
		probe.Detach() // the burst is queued; nothing more comes in
		after, err := probe.Stats()
		if err != nil {
			b.Fatal(err)
		}
		dbPath := filepath.Join(b.TempDir(), "c.db")
		st, err := sqlite.Open(dbPath, sqlite.Config{}, zerolog.Nop())
		if err != nil {
			b.Fatal(err)
		}
		w := NewStoreWriter(st)
		a, err := New(Default(), nil, w, zerolog.Nop(), nil)
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		agentDone := make(chan struct{})
		go func() { defer close(agentDone); a.Run(ctx) }()
		var execs atomic.Int64
		seen := map[string]bool{} // distinct exec'd processes: a re-exec updates its row
		runDone := make(chan struct{})

		b.StartTimer()
		start := time.Now()
		go func() {
			defer close(runDone)
			probe.Run(ctx, func(ev capture.Event) {
				if ev.Kind == capture.KindExec {
					execs.Add(1)
					seen[ev.ProcessID] = true
				}
				a.Process(ctx, ev)
			}, nil)
		}()
		for probe.Backlog() > 0 {
			time.Sleep(time.Millisecond)
		}
		// Everything is read; wait for the agent to hand it to the writer,
		// then for the writer to commit it.
		for len(a.procs) > 0 {
			time.Sleep(time.Millisecond)
		}
		if err := w.Flush(context.Background()); err != nil {
			b.Fatal(err)
		}
		elapsed += time.Since(start)
		b.StopTimer()

		cancel()
		<-runDone
		<-agentDone
		w.Close()
		st.Close()
		probe.Close()
		rows := countRows(b, dbPath)
		events += execs.Load()
		drops += int64(after.RingbufDrops - before.RingbufDrops)
		missing += int64(len(seen)) - rows
	}
	b.ReportMetric(float64(events)/elapsed.Seconds(), "events/s")
	b.ReportMetric(float64(events)/float64(b.N), "execs/burst")
	b.ReportMetric(float64(drops)/float64(b.N), "drops/burst")
	b.ReportMetric(float64(missing)/float64(b.N), "unstored/burst")
}

func countRows(b *testing.B, path string) int64 {
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	var n int64 // rows, and the processes runs hold (schema 9)
	if err := db.QueryRow(`SELECT (SELECT count(*) FROM processes) +
		(SELECT coalesce(sum(n), 0) FROM process_runs)`).Scan(&n); err != nil {
		b.Fatal(err)
	}
	return n
}
