package elasticsearch

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/execid/correlator/internal/escluster"
	itest "github.com/execid/correlator/internal/testutil"
	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/store"
)

// outageFleet is agents writing one prefix through their writers while a
// test takes nodes away, with a ledger of what each driver added.
type outageFleet struct {
	agents  []*fleetAgent
	drivers []*execDriver
	// added[i] is agent i's: process ID to whether its exit was added
	// (written by its driver's goroutine; read once the drivers stopped).
	added  []map[string]bool
	counts fleetCounts
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// startOutageFleet starts n agents on cfg, each driven at rate execs/s.
func startOutageFleet(t *testing.T, cfg Config, n, rate int, opts ...store.WriterOption) *outageFleet {
	t.Helper()
	f := &outageFleet{}
	ctx, cancel := context.WithCancel(context.Background())
	f.cancel = cancel
	for _, a := range openFleet(t, cfg, n, &f.counts, true, opts...) {
		added := map[string]bool{}
		d := &execDriver{a: a, rate: rate, exitAfter: 50 * time.Millisecond,
			added: func(p *join.Process, exit bool) { added[p.ProcessID] = added[p.ProcessID] || exit }}
		f.agents, f.drivers, f.added = append(f.agents, a), append(f.drivers, d), append(f.added, added)
	}
	for _, d := range f.drivers {
		f.wg.Go(func() { d.run(ctx) })
	}
	t.Cleanup(f.stop)
	return f
}

// stop stops the drivers and waits for them; it may be called again.
func (f *outageFleet) stop() {
	f.cancel()
	f.wg.Wait()
}

func (f *outageFleet) commits() []int64 {
	out := make([]int64, len(f.agents))
	for i, a := range f.agents {
		out[i] = a.commits.Load()
	}
	return out
}

// waitCommitted waits until every agent has committed since snapshot
// since (nil: ever).
func (f *outageFleet) waitCommitted(t *testing.T, what string, since []int64, timeout time.Duration) {
	t.Helper()
	itest.EventuallyWithin(t, timeout, what, func() bool {
		for i, a := range f.agents {
			if since != nil && a.commits.Load() <= since[i] || a.commits.Load() == 0 {
				return false
			}
		}
		return true
	})
}

func (f *outageFleet) dropped() int64 {
	var n int64
	for _, a := range f.agents {
		n += a.w.Stats().Dropped
	}
	return n
}

// drain stops the drivers, then flushes each writer: a nil Flush has
// committed every row the writer held. It closes the writers.
func (f *outageFleet) drain(t *testing.T) {
	t.Helper()
	f.stop()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for _, a := range f.agents {
		if err := a.w.Flush(ctx); err != nil {
			t.Fatalf("flushing agent %d's writer: %v", a.node, err)
		}
		if err := a.w.Healthy(); err != nil {
			t.Fatalf("agent %d's writer unhealthy after its flush: %v", a.node, err)
		}
		if err := a.w.Close(); err != nil {
			t.Fatalf("closing agent %d's writer: %v", a.node, err)
		}
	}
}

// fleetLedger is what the fleet's accounting came to, in process IDs.
type fleetLedger struct {
	added, committed, stored int
	// Lost: processes not stored, and exits not stored of processes that
	// are; lostRows, the Adds they took (a start, and an exit if added),
	// each a row the writers counted as dropped, or silent loss.
	missing, lostExits, lostRows int
	dropped                      int64
}

// check compares every document of the prefix with what the fleet added
// and committed: each row a writer had acknowledged is stored (with its
// exit when the row held it), nothing is stored that was never added, and
// every added row not stored is one the writers counted as dropped.
func (f *outageFleet) check(t *testing.T, s *Store) fleetLedger {
	t.Helper()
	stored := fleetStoredProcesses(t, s)
	var l fleetLedger
	l.stored, l.dropped = len(stored), f.dropped()
	all := map[string]bool{}
	var unacked []string
	for i, a := range f.agents {
		for id, exit := range a.committed {
			l.committed++
			if got, ok := stored[id]; !ok || exit && !got {
				unacked = append(unacked, fmt.Sprintf("%s (stored %t, exit %t of %t)", id, ok, got, exit))
			}
		}
		for id, exit := range f.added[i] {
			all[id] = true
			switch got, ok := stored[id]; {
			case !ok:
				l.missing++
				l.lostRows++
				if exit {
					l.lostRows++
				}
			case exit && !got:
				l.lostExits++
				l.lostRows++
			}
		}
	}
	l.added = len(all)
	if len(unacked) > 0 {
		t.Errorf("%d of %d acknowledged processes are not stored as acknowledged, e.g. %v", len(unacked), l.committed,
			unacked[:min(5, len(unacked))])
	}
	for id := range stored {
		if !all[id] {
			t.Errorf("stored process %s was never added", id)
			break
		}
	}
	if int64(l.lostRows) > l.dropped {
		t.Errorf("silent loss: %d processes and %d exits missing (%d rows), the writers dropped only %d rows",
			l.missing, l.lostExits, l.lostRows, l.dropped)
	}
	return l
}

// killableCluster returns the shared cluster, skipping where its nodes cannot be
// killed (a cluster given by URL).
func killableCluster(t *testing.T) *escluster.Cluster {
	t.Helper()
	if os.Getenv(escluster.EnvURL) != "" {
		t.Skip("kills nodes: needs the cluster escluster starts, not one given by " + escluster.EnvURL)
	}
	return escluster.Shared(t)
}

// restartNodes starts nodes again and waits for the cluster to be green
// with all its nodes, returning how long that took. All of them start at
// once through escluster.Up: one at a time, the first would wait out its
// discovery timeout (30 s) for the others.
func restartNodes(cl *escluster.Cluster, nodes ...int) (time.Duration, error) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if len(nodes) > 1 {
		ecfg, err := escluster.ConfigFromEnv()
		if err != nil {
			return 0, err
		}
		if _, err := escluster.Up(ctx, ecfg, io.Discard); err != nil {
			return 0, err
		}
	}
	for _, i := range nodes { // starts a node Up did not, and marks it up in cl
		if err := cl.StartNode(i); err != nil {
			return 0, err
		}
	}
	err := cl.WaitHealth(ctx, "green", cl.Nodes())
	return time.Since(start), err
}

// leaveClusterWhole starts nodes at the end of t, whatever happened: the next
// test shares the cluster. A node running already is left as it is.
func leaveClusterWhole(t *testing.T, cl *escluster.Cluster, nodes ...int) {
	t.Cleanup(func() {
		if _, err := restartNodes(cl, nodes...); err != nil {
			t.Errorf("leaving the cluster whole: %v", err)
		}
	})
}

// primaryNodeOf is the number of the node that holds index's primary.
func primaryNodeOf(t *testing.T, s *Store, index string) int {
	t.Helper()
	var rows []struct{ Prirep, Node, State string }
	q := url.Values{"format": {"json"}, "h": {"prirep,node,state"}}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	itest.EventuallyWithin(t, time.Minute, "the primary of "+index+" started", func() bool {
		rows = nil
		if err := s.c.do(ctx, http.MethodGet, "/_cat/shards/"+index, q, nil, &rows); err != nil {
			return false
		}
		for _, r := range rows {
			if r.Prirep == "p" && r.State == "STARTED" {
				return true
			}
		}
		return false
	})
	for _, r := range rows {
		var n int
		if _, err := fmt.Sscanf(r.Node, "n%d", &n); r.Prirep == "p" && err == nil {
			return n
		}
	}
	t.Fatalf("no primary of %s on a node n<i>: %+v", index, rows)
	return -1
}
