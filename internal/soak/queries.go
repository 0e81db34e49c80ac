package soak

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/execid/correlator/pkg/api"
	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/vocab"
)

// queries asks the agent what a responder asks, every interval: who ran
// commands in a pod, a user's sessions, a session's tree, processes by
// command; and times each answer, from a process of its own.
type queries struct {
	base  string // the agent's API
	timer *timer // times each query in a process of its own (timer.go)
	load  *load
	up    func() bool // an agent is running (a failed query then counts)
	// agentPID is the running agent's PID, 0 between two.
	agentPID func() int

	start time.Time // the soak's, for each query's Elapsed

	mu        sync.Mutex
	latencies []time.Duration // since the last sample
	log       []Query         // the whole run's (queries.csv), for its p99s
	fails     atomic.Int64
	lastErr   atomic.Value
}

func (q *queries) run(ctx context.Context, interval time.Duration) {
	rng := rand.New(rand.NewPCG(7, uint64(time.Now().UnixNano())))
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		a, ok := q.load.pick(rng)
		if !ok {
			continue
		}
		p := q.load.pods[rng.IntN(len(q.load.pods))]
		asks := []struct{ kind, path string }{
			// as kubectl correlator who POD
			{"who", "/api/v1/sessions?" + url.Values{"namespace": {p.namespace}, "pod": {p.name}, "limit": {"50"}}.Encode()},
			{"sessions by user", "/api/v1/sessions?" + url.Values{"user": {a.user}, "limit": {"50"}}.Encode()},
			{"session tree", "/api/v1/sessions/" + url.PathEscape(a.auditID)},
			{"processes by command", "/api/v1/processes?" + url.Values{"command": {"/bin/sleep 5"}, "pod": {p.name}, "limit": {"100"}}.Encode()},
			{controlKind, "/healthz"},
		}
		for _, a := range asks {
			if ctx.Err() != nil {
				return
			}
			q.time(a.kind, q.base+a.path)
		}
	}
}

// controlKind is the control beside the responders' queries: the
// agent's /healthz, served by the same process, server and loopback but
// reading no store and checking no token. What it takes at the client is
// what this node gives a request that does no work, so a query's time
// over it is the query's own; it is timed, kept and reported by kind, and
// left out of the query p99 the targets judge.
const controlKind = "control: /healthz"

func (q *queries) time(kind, url string) {
	at := time.Now()
	pid := q.agentPID()
	before, berr := agentCPU(pid)
	tm, err := q.timer.get(url)
	after, aerr := agentCPU(pid)
	agent := cpuBetween(before, after, errors.Join(berr, aerr))
	if err != nil {
		if q.up() {
			q.fails.Add(1)
			q.lastErr.Store(err.Error())
		}
		return
	}
	q.add(Query{At: at, Elapsed: at.Sub(q.start), Kind: kind, Took: tm.took, FirstByte: tm.firstByte, TimerWaited: tm.waited,
		AgentWaited: agent.waited, AgentRan: agent.ran})
}

// add keeps a timed query for the run, and for the next sample's p99 but
// for the control.
func (q *queries) add(e Query) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if e.Kind != controlKind {
		q.latencies = append(q.latencies, e.Took)
	}
	q.log = append(q.log, e)
}

// agentCPU is what agent pid's threads have run and waited for a CPU so
// far (cpuTimes); an error for none (0).
func agentCPU(pid int) (cpuTime, error) {
	if pid == 0 {
		return cpuTime{}, errors.New("no agent running")
	}
	return cpuTimes(strconv.Itoa(pid))
}

// cpuBetween is what the agent's threads ran and waited between two
// readings; both unknownWait where either reading failed or a count went
// back (a thread exited between them).
func cpuBetween(before, after cpuTime, err error) cpuTime {
	if err != nil || after.ran < before.ran || after.waited < before.waited {
		return cpuTime{ran: unknownWait, waited: unknownWait}
	}
	return cpuTime{ran: after.ran - before.ran, waited: after.waited - before.waited}
}

// interval returns the latencies since the last call.
func (q *queries) interval() []time.Duration {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := q.latencies
	q.latencies = nil
	return out
}

// KindLatency is one kind of query's latency over the run, ms.
type KindLatency struct {
	N                  int
	P50, P90, P99, Max float64
}

func (k KindLatency) String() string {
	return fmt.Sprintf("p50 %.2f, p90 %.2f, p99 %.2f, most %.2f ms (%d queries)", k.P50, k.P90, k.P99, k.Max, k.N)
}

// byKind returns the p99 of every responder's query (the control left
// out) and each kind's latency, the control's too: the p99 alone does
// not say whether a kind is slow throughout or at times.
func (q *queries) byKind() (all float64, kinds map[string]KindLatency) {
	q.mu.Lock()
	defer q.mu.Unlock()
	var ds []time.Duration
	each := map[string][]time.Duration{}
	for _, e := range q.log {
		if e.Kind != controlKind {
			ds = append(ds, e.Took)
		}
		each[e.Kind] = append(each[e.Kind], e.Took)
	}
	kinds = map[string]KindLatency{}
	for k, ds := range each {
		kinds[k] = KindLatency{N: len(ds), P50: quantileMS(ds, 0.5), P90: quantileMS(ds, 0.9),
			P99: quantileMS(ds, 0.99), Max: quantileMS(ds, 1)}
	}
	return p99(ds), kinds
}

// formatKinds writes one line per kind, in name order.
func formatKinds(kinds map[string]KindLatency) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(kinds)) {
		fmt.Fprintf(&b, "  %s: %s\n", k, kinds[k])
	}
	return b.String()
}

// timerWaits is what the timer's threads waited for a CPU within its
// queries (Query.TimerWaited), over those it read, and how many it could
// not.
func timerWaits(qs []Query) (KindLatency, int) {
	return waits(qs, func(q Query) time.Duration { return q.TimerWaited })
}

// agentWaits is what the agent's threads waited for a CPU within the
// queries that took over slow (Query.AgentWaited), over those read, and
// how many were not: beside the agent's own time for the route, it says
// whether a slow query's time went to its work or to waiting for the
// node's CPUs.
func agentWaits(qs []Query, slow time.Duration) (KindLatency, int) {
	return waits(slowerThan(qs, slow), func(q Query) time.Duration { return q.AgentWaited })
}

// agentRuns is what the agent's threads ran on a CPU within the queries
// that took over slow (Query.AgentRan): beside their wait, whether the
// agent was busy with other work then or held off the CPUs.
func agentRuns(qs []Query, slow time.Duration) (KindLatency, int) {
	return waits(slowerThan(qs, slow), func(q Query) time.Duration { return q.AgentRan })
}

// slowerThan is the queries of qs that took longer than slow.
func slowerThan(qs []Query, slow time.Duration) []Query {
	var out []Query
	for _, q := range qs {
		if q.Took > slow {
			out = append(out, q)
		}
	}
	return out
}

// waits is the distribution of wait over qs, those unknownWait left out
// and counted.
func waits(qs []Query, wait func(Query) time.Duration) (KindLatency, int) {
	var ds []time.Duration
	unknown := 0
	for _, q := range qs {
		if wait(q) < 0 {
			unknown++
			continue
		}
		ds = append(ds, wait(q))
	}
	return KindLatency{N: len(ds), P50: quantileMS(ds, 0.5), P90: quantileMS(ds, 0.9),
		P99: quantileMS(ds, 0.99), Max: quantileMS(ds, 1)}, unknown
}

// formatFirstBytes writes, for each kind in name order, its queries' time
// to the response's first byte and from it to the last: the agent writes
// an answer once it is whole, so a slow query's time is either before the
// answer left (the agent's wakeup, its handler) or after (the passage).
func formatFirstBytes(qs []Query) string {
	before, after := map[string][]time.Duration{}, map[string][]time.Duration{}
	for _, q := range qs {
		before[q.Kind] = append(before[q.Kind], q.FirstByte)
		after[q.Kind] = append(after[q.Kind], q.Took-q.FirstByte)
	}
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(before)) {
		fmt.Fprintf(&b, "  %s: to the first byte p50 %.2f, p99 %.2f; after it p50 %.2f, p99 %.2f ms\n", k,
			quantileMS(before[k], 0.5), quantileMS(before[k], 0.99), quantileMS(after[k], 0.5), quantileMS(after[k], 0.99))
	}
	return b.String()
}

// formatRoutes writes each route's p99, in name order, but for those not
// asked (NaN).
func formatRoutes(p99s map[string]float64) string {
	var parts []string
	for _, r := range slices.Sorted(maps.Keys(p99s)) {
		if math.IsNaN(p99s[r]) {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %.2f", r, p99s[r]))
	}
	return strings.Join(parts, ", ")
}

// p99 of ds in ms, 0 for none.
func p99(ds []time.Duration) float64 { return quantileMS(ds, 0.99) }

// quantileMS is the q-th quantile of ds (the nearest rank at or above
// it; 1 is the most), in ms, 0 for none.
func quantileMS(ds []time.Duration, q float64) float64 {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := min(len(s)-1, int(float64(len(s))*q))
	return float64(s[i]) / float64(time.Millisecond)
}

// verifier looks up every acknowledged request after settle: its
// session must be stored, with its user (else the record was lost), and
// its root attributed to it within giveUp (else it counts unattributed:
// rows the store dropped while full, counted there, not a lost record).
type verifier struct {
	client         *api.Client
	load           *load
	settle, giveUp time.Duration

	verified, lost, unattributed atomic.Int64

	mu      sync.Mutex
	lostIDs []string
	pending []pendingCheck
}

// pendingCheck is a request being verified and when it was last looked up.
type pendingCheck struct {
	ackedReq
	tried time.Time
}

// run looks up what is due every tick, and what is still waiting for its
// attribution every retry. Its ticks fall between the responders'
// queries (every 2 s from the start; run starts half a tick late, and a
// tick of 250 ms never lands on a whole second): a burst of lookups at
// each responder's query made that query wait for the CPU behind the
// verifier's, which a responder on a node does not meet.
func (v *verifier) run(ctx context.Context, tick, retry time.Duration) {
	select {
	case <-ctx.Done():
		return
	case <-time.After(tick / 2):
	}
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		v.once(ctx, v.settle, retry)
	}
}

// once looks up what was acknowledged settle ago and what is still
// waiting for its attribution, if not looked up within retry.
func (v *verifier) once(ctx context.Context, settle, retry time.Duration) {
	for _, a := range v.load.due(settle) {
		v.pending = append(v.pending, pendingCheck{ackedReq: a})
	}
	var keep []pendingCheck
	for i, p := range v.pending {
		if !p.tried.IsZero() && time.Since(p.tried) < retry {
			keep = append(keep, p)
			continue
		}
		stored, err := v.check(ctx, p.ackedReq)
		p.tried = time.Now()
		switch {
		case ctx.Err() != nil:
			v.pending = append(keep, v.pending[i:]...)
			return
		case err == nil:
			v.verified.Add(1)
		case time.Since(p.at) <= v.giveUp:
			keep = append(keep, p)
		case stored:
			v.verified.Add(1)
			v.unattributed.Add(1)
		default:
			v.lost.Add(1)
			v.mu.Lock()
			v.lostIDs = append(v.lostIDs, fmt.Sprintf("%s (%s): %v", p.auditID, p.user, err))
			v.mu.Unlock()
		}
	}
	v.pending = keep
}

// waiting counts what the verifier has yet to decide.
func (v *verifier) waiting() int {
	v.load.mu.Lock()
	defer v.load.mu.Unlock()
	return len(v.pending) + len(v.load.toCheck)
}

// check reports whether a's session is stored with its user, and nil
// when a process is attributed to it too. It first asks for one such
// process of a session of that user (a page of one); only when there is
// none does it read the session's whole tree to say why. Reading every
// tree (a session of 20 to 400 processes, five a second) was some 25
// times the responders' queries and doubled their p99 (docs/benchmarks.md).
// The user filter also matches a session that impersonated the user; the
// load's requests impersonate no one.
func (v *verifier) check(ctx context.Context, a ackedReq) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	page, err := v.client.Processes(ctx, url.Values{"auditID": {a.auditID}, "user": {a.user}, "limit": {"1"}})
	if err == nil && len(page.Items) == 1 && page.Items[0].Attribution.Counted() && page.Items[0].AuditID == a.auditID {
		return true, nil
	}
	return v.checkTree(ctx, a)
}

// checkTree is check from the session's tree.
func (v *verifier) checkTree(ctx context.Context, a ackedReq) (bool, error) {
	s, err := v.client.Session(ctx, a.auditID)
	if err != nil {
		return false, err
	}
	if s.User.Username != a.user {
		return false, fmt.Errorf("stored user %q, want %q", s.User.Username, a.user)
	}
	for _, p := range s.Processes {
		if p.Attribution.Counted() && p.AuditID == a.auditID {
			return true, nil
		}
	}
	return true, fmt.Errorf("no process attributed: %d processes (%v)", len(s.Processes), attributions(s.Processes))
}

func attributions(ps []join.Process) []vocab.Attribution {
	var out []vocab.Attribution
	for _, p := range ps {
		out = append(out, p.Attribution)
	}
	return out
}
