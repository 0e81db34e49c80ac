package elasticsearch

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/execid/correlator/pkg/capture"
	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/store"
	"github.com/execid/correlator/pkg/vocab"
)

// countingTransport counts the bytes of _bulk request bodies and the
// search requests.
type countingTransport struct{ bulkBytes, searches atomic.Int64 }

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if strings.HasSuffix(r.URL.Path, "/_bulk") && r.ContentLength > 0 {
		c.bulkBytes.Add(r.ContentLength)
	}
	if strings.HasSuffix(r.URL.Path, "/_search") {
		c.searches.Add(1)
	}
	return http.DefaultTransport.RoundTrip(r)
}

// BenchmarkBulkIndexProcesses indexes batches of 1000 realistic process
// records into the real cluster over loopback HTTP: documents per second
// and bytes of bulk body per document. Writes do not wait for the refresh,
// as an agent's do not.
func BenchmarkBulkIndexProcesses(b *testing.B) {
	cfg := clusterConfig(b)
	ct := &countingTransport{}
	cfg.Transport, cfg.Refresh = ct, "false"
	s := openCluster(b, cfg)
	const batch = 1000
	start := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	mk := func(round int) []join.Process {
		ps := make([]join.Process, batch)
		for i := range ps {
			n := round*batch + i
			code := 0
			ps[i] = join.Process{
				Exec: capture.Exec{
					ProcessID: fmt.Sprintf("%d-%d", 4000+n, start.UnixNano()+int64(n)), ParentProcessID: fmt.Sprintf("1-%d", start.UnixNano()),
					PID: uint32(4000 + n), PPID: 1, UID: 1000, Filename: "/usr/bin/curl",
					Argv:        []string{"curl", "-sS", "https://example.internal/api/v1/items?page=" + fmt.Sprint(n)},
					ContainerID: "3f2a9c1e0b7d4e5f8a6b", PodUID: "0f8e2d1c-5b6a-4c3d-9e8f-7a6b5c4d3e2f",
					SessionRootID: fmt.Sprintf("1-%d", start.UnixNano()),
				},
				Namespace: "payments", Pod: "api-7d9f8c6b5-x2x4q", Container: "api",
				Start:    start.Add(time.Duration(n) * time.Millisecond),
				ExecTime: start.Add(time.Duration(n)*time.Millisecond + time.Microsecond),
				Exit:     start.Add(time.Duration(n)*time.Millisecond + time.Second), ExitCode: &code,
				AuditID: "8b8398cd-1d93-4659-805e-0c9d616aa960", Attribution: vocab.AttributionAuditID,
				Confidence: 1, Source: vocab.SourceEnv,
			}
		}
		return ps
	}
	batches := make([][]join.Process, 8)
	for i := range batches {
		batches[i] = mk(i)
	}
	ctx := context.Background()
	b.ResetTimer()
	t0 := time.Now()
	for i := 0; i < b.N; i++ {
		if err := s.Write(ctx, store.Batch{Processes: batches[i%len(batches)]}); err != nil {
			b.Fatal(err)
		}
	}
	el := time.Since(t0)
	b.StopTimer()
	docs := float64(b.N * batch)
	b.ReportMetric(docs/el.Seconds(), "docs/s")
	b.ReportMetric(float64(ct.bulkBytes.Load())/docs, "bytes/doc")
}
