package agent

import (
	"context"
	"fmt"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/execid/correlator/internal/testutil"
	"github.com/execid/correlator/pkg/auditlog"
	"github.com/execid/correlator/pkg/capture"
	"github.com/execid/correlator/pkg/store"
	"github.com/execid/correlator/pkg/vocab"
)

// BenchmarkSessionExecCPU is the userspace half of the agent's cost per
// in-session exec, without the kernel ring: an exec and an exit event of a
// session's child handed to the agent at a steady rate, joined, evaluated
// and committed to SQLite with `correlator run`'s writer settings. It
// reports the process's CPU (utime+stime, getrusage) per exec from the
// first event until every child's exited row is committed; the feeder's own
// share (building the events) is included. One op is one exec.
func BenchmarkSessionExecCPU(b *testing.B) {
	for _, rate := range []int{300, 3000} {
		b.Run(fmt.Sprintf("rate=%d", rate), func(b *testing.B) {
			var exited atomic.Int64
			p := newBenchPipeline(b, store.WithCommitHook(func(bt store.Batch, err error) {
				if err != nil {
					return
				}
				for p := range bt.AllProcesses() {
					if !p.Exit.IsZero() && p.Attribution == vocab.AttributionInherited {
						exited.Add(1)
					}
				}
			}))
			ctx := context.Background()
			id, at := testutil.RandomUUID(), time.Now()
			sendAudit(b, p.a, auditEvents(b, auditlog.NewParser(0), id, at))
			root := rootEvent(0, id, at)
			if err := p.a.Process(ctx, root); err != nil {
				b.Fatal(err)
			}
			code := 0
			gap := time.Second / time.Duration(rate)
			b.ResetTimer()
			cpu0, start := rusageCPU(b), time.Now()
			for i := 1; i <= b.N; i++ {
				// Paced, not waiting on anything: event i is due at start +
				// i*gap (a Ticker drops late ticks, and reached 200 of 300/s).
				if d := time.Until(start.Add(time.Duration(i) * gap)); d > 0 {
					time.Sleep(d)
				}
				ev := rootEvent(i, id, time.Now())
				ev.ParentProcessID, ev.Source, ev.SessionRootID = root.ProcessID, vocab.SourceInherited, root.ProcessID
				ev.Argv, ev.Filename = []string{"/bin/true"}, "/bin/true"
				if err := p.a.Process(ctx, ev); err != nil {
					b.Fatal(err)
				}
				exit := capture.Event{Kind: capture.KindExit, Time: time.Now(), ExitCode: &code, Exec: ev.Exec}
				if err := p.a.Process(ctx, exit); err != nil {
					b.Fatal(err)
				}
			}
			testutil.Eventually(b, "every child's exit committed", func() bool { return exited.Load() >= int64(b.N) })
			cpu, wall := rusageCPU(b)-cpu0, time.Since(start)
			b.StopTimer()
			b.ReportMetric(float64(cpu.Nanoseconds())/1e3/float64(b.N), "cpu-µs/exec")
			b.ReportMetric(float64(b.N)/wall.Seconds(), "execs/s")
		})
	}
}

// rusageCPU is this process's user and system CPU so far.
func rusageCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
