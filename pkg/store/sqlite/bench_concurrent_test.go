package sqlite

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/store"
)

// BenchmarkQuerySoakWhileWriting is make soak's queries while a writer
// commits a few processes every 10 ms, as the agent's does at 300 execs/s,
// with 20 ms between queries: what a query waits for besides its own work
// (SQLite's locks, the remap after a commit, the writer's CPU) shows in
// its tail against BenchmarkQuerySoakAfterWrite's.
func BenchmarkQuerySoakWhileWriting(b *testing.B) {
	d := soakStore(b)
	for _, q := range soakQueries(d) {
		b.Run(q.name, func(b *testing.B) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel() // b.Fatal below must not leave the writer running
			var wg sync.WaitGroup
			var werr error
			wg.Go(func() { werr = writeEvery(ctx, d.store, 10*time.Millisecond, 3) })
			rng := rand.New(rand.NewPCG(1, uint64(b.N)))
			lat := make([]time.Duration, 0, b.N)
			pace := time.NewTicker(20 * time.Millisecond)
			defer pace.Stop()
			b.ResetTimer()
			for range b.N {
				<-pace.C
				t := time.Now()
				if _, err := q.run(rng); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(t))
			}
			b.StopTimer()
			cancel()
			wg.Wait()
			if werr != nil {
				b.Fatal(werr)
			}
			slices.Sort(lat)
			b.ReportMetric(percentileMS(lat, 0.50), "p50-ms")
			b.ReportMetric(percentileMS(lat, 0.99), "p99-ms")
			b.ReportMetric(percentileMS(lat, 1), "max-ms")
		})
	}
}

// writeEvery commits n new processes every interval until ctx is done.
func writeEvery(ctx context.Context, s *Store, interval time.Duration, n int) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	at := base.Add(time.Hour)
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		var ps []join.Process
		for k := range n {
			p := process(fmt.Sprintf("c-%d-%d", i, k), "00000000-0000-4000-8000-000000000001", 0)
			p.Namespace, p.Pod, p.Argv, p.Start = "ci", "runner-1", []string{"/bin/true"}, at
			p.Exit, p.ExitCode = at.Add(time.Millisecond), ptr(0)
			at = at.Add(time.Millisecond)
			ps = append(ps, p)
		}
		if err := s.Write(ctx, store.Batch{Processes: ps}); err != nil && ctx.Err() == nil {
			return err
		}
	}
}
