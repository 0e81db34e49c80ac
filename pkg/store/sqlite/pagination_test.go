package sqlite

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/store"
)

// TestPaginationStableUnderConcurrentInserts pages through sessions and
// processes while another goroutine inserts rows, newer ones and some with
// times equal to or older than existing rows. Every row that existed at
// the start is seen exactly once, and no row is seen twice.
func TestPaginationStableUnderConcurrentInserts(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	const n = 2000
	var sessions []join.Session
	var procs []join.Process
	for i := range n {
		// Pairs share a timestamp, so the id tie-break is exercised.
		ss := session(fmt.Sprintf("old-%d", i), fmt.Sprintf("user%d", i%3), i/2)
		sessions = append(sessions, ss)
		p := process(fmt.Sprintf("oldp-%d", i), ss.AuditID, i/2)
		procs = append(procs, p)
	}
	mustUpsert(t, s, sessions, procs)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		rng := rand.New(rand.NewPCG(1, 2))
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			var ss []join.Session
			var ps []join.Process
			for j := range 20 {
				minute := n + i // newer than everything
				if j%4 == 0 {
					minute = rng.IntN(n / 2) // among the existing rows
				}
				x := session(fmt.Sprintf("new-%d-%d", i, j), "user0", minute)
				ss = append(ss, x)
				ps = append(ps, process(fmt.Sprintf("newp-%d-%d", i, j), x.AuditID, minute))
			}
			// Existing rows are rewritten too, as late audit stages do.
			ss = append(ss, sessions[rng.IntN(n)])
			if err := s.Upsert(ctx, ss, ps); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	defer func() { close(stop); wg.Wait() }()

	check := func(kind string, seen map[string]int, prefix string) {
		t.Helper()
		for id, c := range seen {
			if c > 1 {
				t.Errorf("%s %s seen %d times", kind, id, c)
			}
		}
		for i := range n {
			if id := fmt.Sprintf("%s%d", prefix, i); seen[id] != 1 {
				t.Errorf("%s %s seen %d times, want once", kind, id, seen[id])
			}
		}
	}

	seen := map[string]int{}
	f := store.SessionFilter{Limit: 37}
	for pages := 0; ; pages++ {
		page, next, err := s.ListSessions(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range page {
			seen[x.AuditID]++
		}
		if next == "" {
			break
		}
		f.Cursor = next
		time.Sleep(time.Millisecond) // let the inserter in between pages
	}
	check("session", seen, "old-")

	seen = map[string]int{}
	pf := store.ProcessFilter{Limit: 41, Pod: "web-0"}
	for {
		page, next, err := s.ListProcesses(ctx, pf)
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range page {
			seen[x.ProcessID]++
		}
		if next == "" {
			break
		}
		pf.Cursor = next
		time.Sleep(time.Millisecond)
	}
	check("process", seen, "oldp-")

	seen = map[string]int{}
	for _, x := range allSessions(t, s, store.SessionFilter{Group: "system:authenticated", Limit: 53}) {
		seen[x.AuditID]++
	}
	check("session by group", seen, "old-")
}
