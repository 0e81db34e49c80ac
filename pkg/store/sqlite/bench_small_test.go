package sqlite

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/execid/correlator/pkg/store"
)

// BenchmarkWriteSmallBatches is the agent's store load at an ordinary exec
// rate: each transaction holds the few processes one ring-buffer drain
// brings (an exec and its exit are one row), so per-transaction costs
// (statement preparation, the commit) weigh on every process. One op is
// one process.
func BenchmarkWriteSmallBatches(b *testing.B) {
	for _, n := range []int{1, 8, 64} {
		b.Run(fmt.Sprintf("rows=%d", n), func(b *testing.B) {
			s, err := Open(filepath.Join(b.TempDir(), "small.db"), Config{}, zerolog.Nop())
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			ctx := context.Background()
			t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			b.ResetTimer()
			for i := 0; i < b.N; i += n {
				var batch store.Batch
				for j := i; j < min(i+n, b.N); j++ {
					p := process(fmt.Sprintf("%d-1", j), "6f1c2d3e-4b5a-4c7d-8e9f-0a1b2c3d4e5f", 0)
					p.Start = t0.Add(time.Duration(j))
					batch.Processes = append(batch.Processes, p)
				}
				if err := s.Write(ctx, batch); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
