package sqlite

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/store"
)

// BenchmarkQuerySoakCommand is make soak's processes-by-command query on a
// store shaped like its ten minutes of one pod: 3,000 exec sessions, each
// a root `sh -c` line of its own and 50 `/bin/true`, every 13th also a
// `/bin/sleep 5` (its root's line holds it too), all exited, written 300
// processes a transaction as the agent commits them. The search is for
// "/bin/sleep 5" in the pod, 100 a page: 460 processes match, in 230 of
// the store's runs. `go test -run '^$' -bench QuerySoakCommand ./pkg/store/sqlite`
func BenchmarkQuerySoakCommand(b *testing.B) {
	s := openTest(b)
	ctx := context.Background()
	var batch []join.Process
	flush := func() {
		if err := s.Write(ctx, store.Batch{Processes: batch}); err != nil {
			b.Fatal(err)
		}
		batch = batch[:0]
	}
	at := base
	for i := range 3000 {
		id := fmt.Sprintf("00000000-0000-4000-8000-%012d", i)
		line := fmt.Sprintf("i=0; while [ $i -lt %d ]; do /bin/true; usleep %d; i=$((i+1)); done", 20+i%80, 1000+i)
		if i%13 == 0 {
			line += "; /bin/sleep 5"
		}
		argvs := [][]string{{"/bin/sh", "-c", line + "; true"}}
		for range 50 {
			argvs = append(argvs, []string{"/bin/true"})
		}
		if i%13 == 0 {
			argvs = append(argvs, []string{"/bin/sleep", "5"})
		}
		for k, argv := range argvs {
			p := process(fmt.Sprintf("%d-%d", i, k), id, 0)
			p.Namespace, p.Pod, p.Argv = "ci", "runner-0", argv
			p.Start, p.ExecTime = at, at
			p.Exit, p.ExitCode = at.Add(time.Millisecond), ptr(0)
			at = at.Add(3 * time.Millisecond)
			batch = append(batch, p)
			if len(batch) == 300 {
				flush()
			}
		}
	}
	flush()
	f := store.ProcessFilter{Command: "/bin/sleep 5", Pod: "runner-0", Limit: 100}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		t := time.Now()
		page, _, err := s.ListProcesses(ctx, f)
		lat = append(lat, time.Since(t))
		if err != nil || len(page) != 100 {
			b.Fatalf("ListProcesses: %d processes, %v; want a page of 100", len(page), err)
		}
	}
	b.StopTimer()
	slices.Sort(lat)
	pct := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) / 1000 }
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
}
