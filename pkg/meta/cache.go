package meta

import (
	"context"
	"fmt"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
)

// cacheEntry is one cached answer. A complete answer never expires (a
// container ID names one container for its life); a miss or a pod-UID-only
// answer expires after the negative TTL so the sources are asked again.
type cacheEntry struct {
	info    Info
	found   bool
	expires time.Time // zero: never
}

// cache is a bounded LRU in front of a Resolver. Errors are not cached.
type cache struct {
	next        Resolver
	lru         *lru.Cache[cacheKey, cacheEntry]
	negativeTTL time.Duration
	metrics     *metrics
	now         func() time.Time
}

type cacheKey struct{ containerID, podUID string }

func newCache(next Resolver, size int, negativeTTL time.Duration, m *metrics) (*cache, error) {
	l, err := lru.New[cacheKey, cacheEntry](size)
	if err != nil {
		return nil, fmt.Errorf("creating meta cache: %w", err)
	}
	return &cache{next: next, lru: l, negativeTTL: negativeTTL, metrics: m, now: time.Now}, nil
}

func (c *cache) Resolve(ctx context.Context, containerID, podUID string) (Info, bool, error) {
	if containerID == "" && podUID == "" {
		return Info{}, false, nil
	}
	key := cacheKey{containerID, podUID}
	if e, ok := c.lru.Get(key); ok && (e.expires.IsZero() || c.now().Before(e.expires)) {
		c.metrics.cacheHit()
		return e.info, e.found, nil
	}
	c.metrics.cacheMiss()
	info, found, err := c.next.Resolve(ctx, containerID, podUID)
	if err != nil && !found {
		return info, found, err
	}
	e := cacheEntry{info: info, found: found}
	if !found || !info.complete() {
		if c.negativeTTL <= 0 {
			return info, found, err
		}
		e.expires = c.now().Add(c.negativeTTL)
	}
	if c.lru.Add(key, e) {
		c.metrics.cacheEviction()
	}
	return info, found, err
}

// len is the number of cached entries.
func (c *cache) len() int { return c.lru.Len() }
