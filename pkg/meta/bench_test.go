package meta

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// BenchmarkResolveWarm resolves containers that are all in the cache, as the
// join does for every process of a running container.
func BenchmarkResolveWarm(b *testing.B) {
	const n = 1024
	entries := make([]Info, n)
	ids := make([]string, n)
	for i := range entries {
		ids[i] = fmt.Sprintf("%064x", i)
		entries[i] = Info{ContainerID: ids[i], PodUID: uidA, Namespace: "default", Pod: fmt.Sprint("pod-", i), Container: "app"}
	}
	static, err := NewStatic(entries)
	if err != nil {
		b.Fatal(err)
	}
	m, err := newMetrics(prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	c, err := newCache(static, 2*n, time.Second, m)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	for _, id := range ids {
		c.Resolve(ctx, id, uidA)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if _, found, _ := c.Resolve(ctx, ids[i%n], uidA); !found {
			b.Fatal("not found")
		}
	}
}
