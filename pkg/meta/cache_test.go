package meta

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// countingResolver is a test double that answers from a map and counts calls.
type countingResolver struct {
	answers map[string]Info
	err     error
	calls   int
}

func (c *countingResolver) Resolve(_ context.Context, containerID, podUID string) (Info, bool, error) {
	c.calls++
	if c.err != nil {
		return Info{}, false, c.err
	}
	if info, ok := c.answers[containerID]; ok {
		return info, true, nil
	}
	if podUID != "" {
		return Info{ContainerID: containerID, PodUID: podUID}, true, nil
	}
	return Info{}, false, nil
}

func newTestCache(t *testing.T, next Resolver, size int, ttl time.Duration) (*cache, *metrics, *time.Time) {
	t.Helper()
	m, err := newMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	c, err := newCache(next, size, ttl, m)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_700_000_000, 0)
	c.now = func() time.Time { return now }
	return c, m, &now
}

func TestCacheBoundAndEvictions(t *testing.T) {
	answers := map[string]Info{}
	for i := range 5 {
		id := fmt.Sprintf("%064x", i)
		answers[id] = Info{ContainerID: id, PodUID: uidA, Namespace: "ns", Pod: fmt.Sprint("p", i)}
	}
	next := &countingResolver{answers: answers}
	c, m, _ := newTestCache(t, next, 3, time.Second)
	ctx := context.Background()
	for i := range 5 {
		id := fmt.Sprintf("%064x", i)
		if got, found, err := c.Resolve(ctx, id, ""); err != nil || !found || !reflect.DeepEqual(got, answers[id]) {
			t.Fatalf("Resolve(%d) = %+v, %v, %v", i, got, found, err)
		}
	}
	if c.len() != 3 {
		t.Errorf("cache holds %d entries, want its size 3", c.len())
	}
	if n := testutil.ToFloat64(m.cacheEvictions); n != 2 {
		t.Errorf("evictions = %v, want 2", n)
	}
	// The three most recent are cached; the first two went to the source again.
	for _, i := range []int{4, 3, 2, 0} {
		c.Resolve(ctx, fmt.Sprintf("%064x", i), "")
	}
	if next.calls != 6 {
		t.Errorf("source asked %d times, want 6 (5 cold + 1 evicted)", next.calls)
	}
	if h, ms := testutil.ToFloat64(m.cacheHits), testutil.ToFloat64(m.cacheMisses); h != 3 || ms != 6 {
		t.Errorf("hits, misses = %v, %v; want 3, 6", h, ms)
	}
	if n := testutil.ToFloat64(m.cacheEvictions); n != 3 {
		t.Errorf("evictions = %v, want 3", n)
	}
}

func TestCacheNegativeTTL(t *testing.T) {
	next := &countingResolver{answers: map[string]Info{cidA: infoA}}
	c, _, now := newTestCache(t, next, 10, 5*time.Second)
	ctx := context.Background()
	resolve := func(cid, uid string) (Info, bool) {
		t.Helper()
		info, found, err := c.Resolve(ctx, cid, uid)
		if err != nil {
			t.Fatal(err)
		}
		return info, found
	}

	// A complete answer never expires.
	resolve(cidA, uidA)
	*now = now.Add(time.Hour)
	resolve(cidA, uidA)
	if next.calls != 1 {
		t.Fatalf("complete answer asked %d times, want 1", next.calls)
	}

	// A miss is cached for the TTL, then asked again.
	next.calls = 0
	if _, found := resolve(cidB, ""); found {
		t.Fatal("found an unknown container")
	}
	*now = now.Add(4 * time.Second)
	resolve(cidB, "")
	if next.calls != 1 {
		t.Fatalf("miss within the TTL asked %d times, want 1", next.calls)
	}
	next.answers[cidB] = infoB
	*now = now.Add(2 * time.Second)
	if got, found := resolve(cidB, ""); !found || !reflect.DeepEqual(got, infoB) {
		t.Fatalf("after the TTL: %+v, %v; want %+v", got, found, infoB)
	}

	// A pod-UID-only answer is cached for the TTL too.
	next.calls = 0
	const cidC = "cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc"
	resolve(cidC, uidA)
	resolve(cidC, uidA)
	*now = now.Add(6 * time.Second)
	resolve(cidC, uidA)
	if next.calls != 2 {
		t.Fatalf("partial answer asked %d times, want 2", next.calls)
	}

	// Nothing to look up asks nothing.
	next.calls = 0
	if _, found := resolve("", ""); found || next.calls != 0 {
		t.Fatalf("empty lookup: found %v, calls %d", found, next.calls)
	}
}

func TestCacheDoesNotCacheErrors(t *testing.T) {
	next := &countingResolver{err: errors.New("socket down")}
	c, _, _ := newTestCache(t, next, 10, time.Minute)
	for range 2 {
		if _, _, err := c.Resolve(context.Background(), cidA, ""); err == nil {
			t.Fatal("error not returned")
		}
	}
	if next.calls != 2 {
		t.Fatalf("source asked %d times, want 2", next.calls)
	}
}
