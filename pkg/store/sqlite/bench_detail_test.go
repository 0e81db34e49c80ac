package sqlite

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/execid/correlator/pkg/capture"
	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/store"
	"github.com/execid/correlator/pkg/vocab"
)

// benchDetailProcess is an inherited process of a session as the joiner
// hands it out: the detail fields of benchSessionProcess, and with
// evidence, the audit ID key's as the kernel captured it.
func benchDetailProcess(evidence bool) join.Process {
	var p join.Process
	p.ContainerID, p.PodUID = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", "6f1c1a0e-0d0b-4c57-9b55-0a3c2d1e4f5a"
	p.PID, p.PPID, p.SessionRootID, p.ParentProcessID = 1234, 999, "999-1", "999-1"
	p.Source = vocab.SourceInherited
	if evidence {
		p.Captured = capture.KeyValue{Value: "6f1c2d3e-4b5a-4c7d-8e9f-0a1b2c3d4e5f", Source: vocab.SourceInherited}
		p.ExecOrigin = capture.OriginInside
	}
	return p
}

// BenchmarkProcessDetail measures a detail column's encoding (on every
// exec's write) and decoding (on every listed row), without and with
// the joiner's evidence.
func BenchmarkProcessDetail(b *testing.B) {
	for _, ev := range []struct {
		name string
		on   bool
	}{{"plain", false}, {"evidence", true}} {
		p := benchDetailProcess(ev.on)
		b.Run("encode/"+ev.name, func(b *testing.B) {
			buf := make([]byte, 0, 512)
			b.ReportAllocs()
			for b.Loop() {
				var err error
				if buf, err = processDetailJSON(buf[:0], &p); err != nil {
					b.Fatal(err)
				}
			}
		})
		col, err := processDetailJSON(nil, &p)
		if err != nil {
			b.Fatal(err)
		}
		b.Run("decode/"+ev.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var got join.Process
				if err := readProcessDetail(sql.NullString{String: string(col), Valid: true}, &got); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkProcessWriteEvidence is BenchmarkProcessWrite's path (150
// exited /bin/true of a session a transaction, over 100,000 stored) with
// the joiner's evidence on every process, as the agent hands them out:
// the audit ID key's value and the exec's origin. One op is one process.
func BenchmarkProcessWriteEvidence(b *testing.B) {
	s, ss, t0 := openSessionBench(b)
	ctx := context.Background()
	ev := benchDetailProcess(true)
	const prefill, perTx = 100_000, 150
	next := 0
	write := func(n int) {
		batch := store.Batch{Processes: make([]join.Process, 0, n)}
		for range n {
			p := benchSessionProcess(ss, t0, next)
			p.Exit, p.ExitCode = p.Start.Add(time.Millisecond), ptr(0)
			p.Captured, p.ExecOrigin = ev.Captured, ev.ExecOrigin
			batch.Processes = append(batch.Processes, p)
			next++
		}
		if err := s.Write(ctx, batch); err != nil {
			b.Fatal(err)
		}
	}
	for next < prefill {
		write(min(5000, prefill-next))
	}
	b.ResetTimer()
	for done := 0; done < b.N; done += perTx {
		write(min(perTx, b.N-done))
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/process")
}
