package elasticsearch

// A fleet of agents on the real cluster: each simulated agent is a Store
// of its own (its own Open, its own HTTP connections) fed through the
// writer `correlator run` gives a node (agent.NewStoreWriter). The
// benchmarks (fleet_bench_test.go) and the outage tests (outage_test.go)
// share the harness here; docs/benchmarks.md has the commands and the
// figures.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/execid/correlator/pkg/agent"
	"github.com/execid/correlator/pkg/capture"
	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/store"
	"github.com/execid/correlator/pkg/vocab"
)

// fleetEnv reads a positive integer from the environment, def if unset.
func fleetEnv(tb testing.TB, name string, def int) int {
	tb.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		tb.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

// fleetCounts counts what a fleet's stores sent: every HTTP request, the
// bulk and search requests among them, the answers that were 429 for the
// whole request (the client retries those itself, unseen by the store's
// item counters), and the requests that got no answer (a node down).
type fleetCounts struct{ requests, bulks, searches, tooMany, unanswered atomic.Int64 }

// fleetTransport is one store's own HTTP transport, counting into c.
type fleetTransport struct {
	next http.RoundTripper
	c    *fleetCounts
}

func newFleetTransport(c *fleetCounts) *fleetTransport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = 8
	return &fleetTransport{next: t, c: c}
}

func (t *fleetTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	t.c.requests.Add(1)
	switch {
	case strings.HasSuffix(r.URL.Path, "/_bulk"):
		t.c.bulks.Add(1)
	case strings.HasSuffix(r.URL.Path, "/_search"):
		t.c.searches.Add(1)
	}
	res, err := t.next.RoundTrip(r)
	switch {
	case err != nil:
		t.c.unanswered.Add(1)
	case res.StatusCode == http.StatusTooManyRequests:
		t.c.tooMany.Add(1)
	}
	return res, err
}

// fleetArgv are the commands the simulated sessions run.
var fleetArgv = [][]string{
	{"sh", "-c", "ps aux | grep -v grep | grep -c java"},
	{"cat", "/etc/os-release"},
	{"curl", "-sS", "-H", "Accept: application/json", "http://orders.payments.svc.cluster.local:8080/api/v1/orders?page=3"},
	{"ls", "-la", "/var/log/app"},
	{"python3", "manage.py", "shell", "-c", "from orders.models import Order; print(Order.objects.count())"},
	{"env"},
	{"tail", "-n", "200", "/var/log/app/server.log"},
	{"psql", "-h", "db.payments.svc", "-U", "app", "-c", "select count(*) from orders where state = 'open'"},
}

var fleetNamespaces = []string{"payments", "checkout", "search", "identity", "catalog", "billing", "ledger", "edge", "ml", "ops"}

// fleetPodName is pod p's name and namespace.
func fleetPodName(p int) (ns, pod string) {
	return fleetNamespaces[p%len(fleetNamespaces)], fmt.Sprintf("api-%d-7d9f8c6b5-x%04d", p/len(fleetNamespaces), p)
}

// fleetAuditID is a UUID-shaped audit ID, distinct for each (node, n).
func fleetAuditID(node, n int) string {
	return fmt.Sprintf("%08x-%04x-4%03x-8%03x-%012x", 0x5e551000+node, n>>16&0xffff, n>>4&0xfff, n&0xfff, uint64(node)<<24|uint64(n))
}

// fleetProcess is a process as the agent stores it: command k%8 of
// fleetArgv run in pod's app container, tied to session aid by its audit
// ID, with parent and session root.
func fleetProcess(id, parent, root, aid string, pid uint32, pod, k int, start time.Time) join.Process {
	ns, name := fleetPodName(pod)
	return join.Process{
		Exec: capture.Exec{
			ProcessID: id, ParentProcessID: parent, SessionRootID: root,
			PID: pid, PPID: 1, UID: 1000, Filename: "/usr/bin/" + fleetArgv[k%len(fleetArgv)][0],
			Argv:        fleetArgv[k%len(fleetArgv)],
			ContainerID: fmt.Sprintf("%032x", 0xc0ffee0000+pod), PodUID: fmt.Sprintf("0f8e2d1c-5b6a-4c3d-9e8f-%012x", pod),
		},
		Namespace: ns, Pod: name, Container: "app",
		Start: start, ExecTime: start.Add(300 * time.Microsecond),
		AuditID: aid, Attribution: vocab.AttributionAuditID, Confidence: 1, Source: vocab.SourceEnv,
		Flags: []string{},
	}
}

// fleetAgent is one simulated node: its store, its writer, and what the
// writer committed. It is the writer's BatchWriter, so it sees every
// commit attempt and its answer.
type fleetAgent struct {
	node int
	s    *Store
	w    *store.Writer

	commits, rows, execs atomic.Int64 // acknowledged writes, rows, rows that held an exit
	writes               []fleetWrite // owned by the writer's goroutine
	// committed, when tracking: process ID to whether an acknowledged
	// row of it held its exit; owned by the writer's goroutine.
	committed map[string]bool
}

type fleetWrite struct {
	at   time.Time
	took time.Duration
	err  bool
}

// Write times one commit of the agent's writer.
func (a *fleetAgent) Write(ctx context.Context, b store.Batch) error {
	start := time.Now()
	err := a.s.Write(ctx, b)
	a.writes = append(a.writes, fleetWrite{start, time.Since(start), err != nil})
	if err != nil {
		return err
	}
	var execs int64
	for p := range b.AllProcesses() {
		ended := !p.Exit.IsZero()
		if ended {
			execs++
		}
		if a.committed != nil {
			a.committed[p.ProcessID] = a.committed[p.ProcessID] || ended
		}
	}
	a.commits.Add(1)
	a.rows.Add(int64(b.Len()))
	a.execs.Add(execs)
	return nil
}

// openFleet opens n agents' stores on cfg, each with a transport of its
// own, eight at a time, and starts the agent's writer in front of each;
// the writers are closed after tb.
func openFleet(tb testing.TB, cfg Config, n int, c *fleetCounts, track bool, opts ...store.WriterOption) []*fleetAgent {
	tb.Helper()
	fleet := make([]*fleetAgent, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for i := range fleet {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			cfg := cfg
			cfg.Transport = newFleetTransport(c)
			fleet[i] = &fleetAgent{node: i}
			fleet[i].s, errs[i] = Open(context.Background(), cfg, zerolog.Nop(), nil)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		tb.Fatalf("opening the fleet's stores: %v", err)
	}
	for _, a := range fleet {
		if track {
			a.committed = map[string]bool{}
		}
		a.w = agent.NewStoreWriter(a, opts...)
		tb.Cleanup(func() { _ = a.w.Close() })
	}
	return fleet
}

// execDriver adds rate execs a second to one agent's writer: each a start
// (one Add) and, exitAfter later, its exit (a second Add of the same
// process), as the joiner emits them. Behind schedule (Add blocks while
// the writer cannot keep up) it catches up as fast as Add lets it.
type execDriver struct {
	a         *fleetAgent
	rate      int
	exitAfter time.Duration
	// added, if set, hears each event once Add took it (the driver's
	// goroutine).
	added func(p *join.Process, exit bool)

	due, done int64 // events due by the end, and added
	maxBlock  time.Duration
}

func (d *execDriver) run(ctx context.Context) {
	every := time.Second / time.Duration(d.rate)
	t0 := time.Now()
	boot := uint64(d.a.node+1) * 1_000_000_000_000_000
	var running []join.Process // started, exit not yet added
	starts, aid, root := 0, "", ""
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	add := func(p join.Process, exit bool) bool {
		b := store.Batch{Processes: []join.Process{p}}
		if exit {
			b = store.Batch{Exits: []join.Process{p}}
		}
		t := time.Now()
		if err := d.a.w.Add(ctx, b); err != nil {
			return false
		}
		d.maxBlock = max(d.maxBlock, time.Since(t))
		d.done++
		if d.added != nil {
			d.added(&p, exit)
		}
		return true
	}
	for {
		select {
		case <-ctx.Done():
			d.due = dueBy(time.Since(t0), every)
			if el := time.Since(t0) - d.exitAfter; el >= 0 {
				d.due += dueBy(el, every)
			}
			return
		case <-tick.C:
		}
		now := time.Since(t0)
		for ctx.Err() == nil {
			nextStart := time.Duration(starts) * every
			if len(running) > 0 && running[0].Start.Sub(t0)+d.exitAfter <= min(now, nextStart) {
				p := running[0]
				p.Exit, p.ExitCode = p.Start.Add(d.exitAfter), new(int)
				if !add(p, true) {
					break
				}
				running = running[1:]
				continue
			}
			if nextStart > now {
				break
			}
			// A session runs 200 commands from one shell; a node holds
			// ten pods.
			if starts%200 == 0 {
				aid, root = fleetAuditID(d.a.node, starts/200), ""
			}
			at := t0.Add(nextStart)
			pid := uint32(2000 + starts%60000)
			id := capture.ProcessKey(pid, boot+uint64(nextStart))
			if root == "" {
				root = id
			}
			p := fleetProcess(id, root, root, aid, pid, d.a.node*10+starts/200%10, starts, at)
			if !add(p, false) {
				break
			}
			running = append(running, p)
			starts++
		}
	}
}

// dueBy is how many events one every interval, the first at 0, are due
// by el.
func dueBy(el, every time.Duration) int64 { return int64(el/every) + 1 }

// fleetPct is the q-quantile of ds (nearest rank), which it sorts.
func fleetPct(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[int(q*float64(len(ds)-1)+0.5)]
}

func fleetMS(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// fleetStoredProcesses reads every process document of s's prefix, after a
// refresh, as process ID to whether it holds an exit, and checks _count
// agrees.
func fleetStoredProcesses(t *testing.T, s *Store) map[string]bool {
	t.Helper()
	ctx := context.Background()
	if err := s.c.do(ctx, http.MethodPost, "/"+s.n.processes+"/_refresh", nil, nil, nil); err != nil {
		t.Fatalf("refreshing: %v", err)
	}
	out := map[string]bool{}
	var after []any
	for {
		body := map[string]any{"size": 10000, "_source": []string{"process.end"},
			"sort": []any{map[string]any{"process.entity_id": "asc"}}}
		if after != nil {
			body["search_after"] = after
		}
		res, err := s.search(ctx, s.n.processes, body)
		if err != nil {
			t.Fatalf("reading the stored processes: %v", err)
		}
		for _, h := range res.Hits.Hits {
			var d struct {
				Process struct {
					End string `json:"end"`
				} `json:"process"`
			}
			if err := json.Unmarshal(h.Source, &d); err != nil {
				t.Fatalf("decoding process %s: %v", h.ID, err)
			}
			out[h.ID] = d.Process.End != ""
		}
		if len(res.Hits.Hits) < 10000 {
			break
		}
		after = res.Hits.Hits[len(res.Hits.Hits)-1].Sort
	}
	if n, err := s.count(ctx, s.n.processes); err != nil || n != int64(len(out)) {
		t.Fatalf("_count = %d (%v), but %d documents read", n, err, len(out))
	}
	return out
}

// fleetCountProcesses is _count of s's processes after a refresh.
func fleetCountProcesses(t *testing.T, s *Store) int64 {
	t.Helper()
	ctx := context.Background()
	if err := s.c.do(ctx, http.MethodPost, "/"+s.n.processes+"/_refresh", nil, nil, nil); err != nil {
		t.Fatalf("refreshing: %v", err)
	}
	n, err := s.count(ctx, s.n.processes)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
