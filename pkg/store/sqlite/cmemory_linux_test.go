//go:build (amd64 || arm64) && !libc.membrk && !libc.memgrind

package sqlite

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"testing"
	"time"

	"github.com/execid/correlator/internal/testutil"
	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/store"
	"github.com/rs/zerolog"
)

// bigValueSQL builds a 32 MiB string in SQLite and returns its length:
// group_concat grows it by doubling, each step a larger allocation
// freed as the next is made.
const bigValueSQL = `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM n WHERE i < 16384)
	SELECT length(group_concat(hex(randomblob(1024)), '')) FROM n`

// rssAnonMiB is the process's resident anonymous memory, after the Go
// heap handed back what it could: what is left of a change is SQLite's.
func rssAnonMiB(t *testing.T) float64 {
	t.Helper()
	debug.FreeOSMemory()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for line := range bytes.Lines(b) {
		if f := bytes.Fields(line); len(f) == 3 && string(f[0]) == "RssAnon:" {
			kib, err := strconv.Atoi(string(f[1]))
			if err != nil {
				t.Fatal(err)
			}
			return float64(kib) / 1024
		}
	}
	t.Fatal("no RssAnon in /proc/self/status")
	return 0
}

// What SQLite freed stays resident in its allocator until the store's
// upkeep trims it. The control: before the loop runs, the 32 MiB value
// a query built and freed is still there.
func TestRunRetentionTrimsSQLiteMemory(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "store.db"), Config{TrimInterval: 20 * time.Millisecond}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	var n int64
	if err := s.r.QueryRowContext(ctx, `SELECT count(*) FROM sessions`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	// What earlier tests left in the pool would serve the value's regions.
	if err := trimCMemory(); err != nil {
		t.Fatal(err)
	}
	before := rssAnonMiB(t)
	if err := s.r.QueryRowContext(ctx, bigValueSQL).Scan(&n); err != nil || n != 32<<20 {
		t.Fatalf("building the value: %d, %v", n, err)
	}
	kept := rssAnonMiB(t)
	if kept-before < 16 {
		t.Fatalf("RssAnon %.1f MiB before the 32 MiB value, %.1f after it was freed: the allocator kept nothing, "+
			"the trim has nothing to show", before, kept)
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.RunRetention(ctx, time.Hour, time.Hour) }()
	testutil.Eventually(t, "the upkeep handed back what SQLite freed", func() bool {
		return rssAnonMiB(t) < before+8
	})
	cancel()
	if err := <-done; err != context.Canceled {
		t.Errorf("RunRetention = %v", err)
	}
	t.Logf("RssAnon %.1f MiB before, %.1f with the value freed, %.1f trimmed", before, kept, rssAnonMiB(t))
}

// The writer's page cache keeps the pages it wrote until it holds
// CacheKiB; trimMemory empties it of those no transaction holds. The
// control: what the allocator alone gives back (the trim without the
// shrink) leaves the cache's pages in place.
func TestTrimMemoryEmptiesTheWritersCache(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	for b := range 20 {
		procs := make([]join.Process, 0, 1000)
		for i := range 1000 {
			id := fmt.Sprintf("p-%d-%d", b, i)
			procs = append(procs, process(id, fmt.Sprintf("a-%d", i%50), b*1000+i))
		}
		mustUpsert(t, s, nil, procs)
	}
	if err := trimCMemory(); err != nil {
		t.Fatal(err)
	}
	cached := rssAnonMiB(t)
	if err := s.trimMemory(ctx); err != nil {
		t.Fatal(err)
	}
	emptied := rssAnonMiB(t)
	t.Logf("RssAnon %.1f MiB with the writer's cache full, %.1f emptied", cached, emptied)
	if cached-emptied < 3 {
		t.Errorf("emptying the writer's %d KiB cache gave back %.1f MiB, want 3 or more", s.cfg.CacheKiB, cached-emptied)
	}
	// The store still reads and writes what it held.
	mustUpsert(t, s, nil, []join.Process{process("after", "a-0", 30000)})
	if ps, _, err := s.ListProcesses(ctx, store.ProcessFilter{AuditID: "a-0", Limit: 1000}); err != nil || len(ps) != 401 {
		t.Errorf("after the trim: %d processes of a-0, %v; want 401", len(ps), err)
	}
}
