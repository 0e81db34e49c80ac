package sqlite

import (
	"context"
	"testing"
	"time"

	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/store"
)

// BenchmarkProcessLifetime is the store's cost of a process that outlives
// a commit (anything running over the writer's one-second gap): its row
// whole at the exec, then its exit in a later transaction, 300 a
// transaction as at 300 execs/s. exit=whole writes the exit as a whole
// row (before the joiner marked exits alone), exit=alone as Batch.Exits.
// One op is one process, both writes.
func BenchmarkProcessLifetime(b *testing.B) {
	for _, alone := range []bool{false, true} {
		name := "exit=whole"
		if alone {
			name = "exit=alone"
		}
		b.Run(name, func(b *testing.B) {
			s, ss, t0 := openSessionBench(b)
			ctx := context.Background()
			const perTx = 300
			var exited []join.Process // the previous transaction's processes
			b.ResetTimer()
			for lo := 0; lo < b.N+perTx; lo += perTx {
				var batch store.Batch
				for i := lo; i < min(lo+perTx, b.N); i++ {
					batch.Processes = append(batch.Processes, benchSessionProcess(ss, t0, i))
				}
				for i := range exited {
					exited[i].Exit, exited[i].ExitCode = exited[i].Start.Add(1500*time.Millisecond), ptr(0)
				}
				if alone {
					batch.Exits = exited
				} else {
					batch.Processes = append(batch.Processes, exited...)
				}
				if batch.Len() > 0 {
					if err := s.Write(ctx, batch); err != nil {
						b.Fatal(err)
					}
				}
				exited = append(exited[:0], batch.Processes[:min(perTx, max(0, b.N-lo))]...)
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/process")
		})
	}
}
