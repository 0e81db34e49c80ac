package cluster_test

import (
	"context"
	"errors"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/execid/correlator/internal/testutil"
	"github.com/execid/correlator/pkg/cluster"
	"github.com/execid/correlator/pkg/cluster/clustertest"
)

// progressLog records a fan-out's Progress calls.
type progressLog struct {
	mu          sync.Mutex
	done, total int
	calls       int
}

func (p *progressLog) report(done, total int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done, p.total, p.calls = done, total, p.calls+1
}

func (p *progressLog) at() (done, total int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.done, p.total
}

func fleetClient(t testing.TB, f *clustertest.Fleet, cfg cluster.Config) *cluster.Client {
	t.Helper()
	if cfg.Rest == nil {
		cfg.Rest = f.Rest()
	}
	c, err := cluster.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Authenticate(context.Background(), cluster.Auth{}); err != nil {
		t.Fatal(err)
	}
	return c
}

// answerAt asks for every session with a context whose deadline passes
// when ready holds (the test decides, so nothing is timed).
func answerAt(t *testing.T, c *cluster.Client, ready func() bool) cluster.Answer[cluster.Session] {
	t.Helper()
	ctx, cancel := context.WithCancelCause(t.Context())
	defer cancel(nil)
	type result struct {
		ans cluster.Answer[cluster.Session]
		err error
	}
	res := make(chan result, 1)
	go func() {
		ans, err := c.Sessions(ctx, url.Values{}, 10_000)
		res <- result{ans, err}
	}()
	testutil.Eventually(t, "the nodes that can answer have, and the hanging ones are held", ready)
	cancel(cluster.ErrDeadline)
	r := <-res
	if r.err != nil {
		t.Fatal(r.err)
	}
	return r.ans
}

func nodesOf(fs []cluster.Failure) []string {
	var out []string
	for _, f := range fs {
		out = append(out, f.Node)
	}
	return out
}

// TestFanOutDeadline: 200 nodes, 10 of whose agents accept the request
// and never answer. When the deadline passes, the answer holds every
// answering node's sessions, is partial, and names exactly the hanging
// nodes, as asked and not answered yet.
func TestFanOutDeadline(t *testing.T) {
	f := clustertest.Start(t, clustertest.Options{Nodes: 200, Hanging: 10, Sessions: 2})
	var p progressLog
	// NodeTimeout is out of reach: only the deadline ends the hanging.
	c := fleetClient(t, f, cluster.Config{NodeTimeout: time.Hour, Progress: p.report})
	ans := answerAt(t, c, func() bool {
		done, _ := p.at()
		return done == len(f.Answering) && f.Held() == len(f.Hanging)
	})

	if !ans.Partial || ans.Nodes != 200 || !errors.Is(ans.Incomplete(), cluster.ErrPartial) {
		t.Errorf("partial %v of %d nodes (%v), want partial of 200", ans.Partial, ans.Nodes, ans.Incomplete())
	}
	if got := nodesOf(ans.Unreachable); !slices.Equal(got, f.Hanging) {
		t.Errorf("unreachable %v, want the hanging %v", got, f.Hanging)
	}
	for _, u := range ans.Unreachable {
		if u.Left != cluster.LeftUnanswered || !strings.Contains(u.Error, "no answer yet") {
			t.Errorf("%s: left %q, %q: want asked and not answered yet", u.Node, u.Left, u.Error)
		}
	}
	var got []string
	for _, s := range ans.Items {
		got = append(got, s.AuditID)
	}
	slices.Sort(got)
	want := f.SessionIDs(f.Answering)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("%d sessions, want the %d of the answering nodes", len(got), len(want))
	}
	if done, total := p.at(); done != total || total != 200 {
		t.Errorf("progress ended at %d/%d, want 200/200", done, total)
	}
}

// TestFanOutDeadlineUnasked: one node asked at a time, the second
// hangs: when the deadline passes the third has not been asked, and is
// named so, apart from the one asked.
func TestFanOutDeadlineUnasked(t *testing.T) {
	f := clustertest.Start(t, clustertest.Options{Nodes: 3, Hanging: 1})
	if !slices.Equal(f.Hanging, []string{"node-0001"}) {
		t.Fatalf("hanging %v, want node-0001", f.Hanging)
	}
	c := fleetClient(t, f, cluster.Config{Concurrency: 1, NodeTimeout: time.Hour})
	ans := answerAt(t, c, func() bool { return f.Held() == 1 })
	want := []cluster.Failure{{Node: "node-0001", Left: cluster.LeftUnanswered}, {Node: "node-0002", Left: cluster.LeftUnasked}}
	if len(ans.Unreachable) != 2 || len(ans.Items) != 1 || ans.Items[0].AuditID != clustertest.SessionID("node-0000", 0) {
		t.Fatalf("items %d, unreachable %+v", len(ans.Items), ans.Unreachable)
	}
	for i, u := range ans.Unreachable {
		if u.Node != want[i].Node || u.Left != want[i].Left || !strings.Contains(u.Error, cluster.ErrDeadline.Error()) {
			t.Errorf("unreachable %+v, want %s %s", u, want[i].Node, want[i].Left)
		}
	}
}

// TestFanOutNodeTimeout: a node that does not answer within NodeTimeout
// failed (it is not left), and says so.
func TestFanOutNodeTimeout(t *testing.T) {
	f := clustertest.Start(t, clustertest.Options{Nodes: 1, Hanging: 1})
	c := fleetClient(t, f, cluster.Config{NodeTimeout: time.Millisecond})
	ans, err := c.Sessions(t.Context(), nil, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(ans.Unreachable) != 1 || ans.Unreachable[0].Left != "" ||
		!strings.Contains(ans.Unreachable[0].Error, "no answer within the node timeout (1ms)") ||
		!errors.Is(ans.Incomplete(), cluster.ErrNoAnswer) {
		t.Errorf("unreachable %+v (%v), want node-0000 timed out", ans.Unreachable, ans.Incomplete())
	}
}

// BenchmarkFanOut1000: `sessions -A` against 1,000 agents, 50 of which
// never answer, at the default settings (Concurrency, NodeTimeout,
// DefaultDeadline, the rate limit that follows Concurrency). With
// CLUSTER_BENCH_OLD_DEFAULTS=1 also at the defaults before (8 at once,
// 30 s a node, no deadline, 50 requests a second): about 210 s an
// answer, so -benchtime 1x. CLUSTER_BENCH_SESSIONS sets the sessions
// each agent holds (3; the answer is the newest 100). Allocated bytes
// include the stand-in kube-apiserver's and agents', which run in this
// process.
func BenchmarkFanOut1000(b *testing.B) {
	sessions := 3
	if n, err := strconv.Atoi(os.Getenv("CLUSTER_BENCH_SESSIONS")); err == nil && n > 0 {
		sessions = n
	}
	f := clustertest.Start(b, clustertest.Options{Nodes: 1000, Hanging: 50, Sessions: sessions})
	run := func(b *testing.B, cfg cluster.Config, deadline time.Duration) {
		c := fleetClient(b, f, cfg)
		b.ReportAllocs()
		b.ResetTimer()
		var missing, items int
		for range b.N {
			ctx, cancel := cluster.WithDeadline(b.Context(), deadline)
			ans, err := c.Sessions(ctx, url.Values{}, 0)
			cancel()
			if err != nil {
				b.Fatal(err)
			}
			missing, items = len(ans.Unreachable), len(ans.Items)
		}
		b.StopTimer()
		b.ReportMetric(b.Elapsed().Seconds()/float64(b.N), "s/answer")
		b.ReportMetric(float64(missing), "nodes-missing")
		b.ReportMetric(float64(items), "rows")
	}
	b.Run("defaults", func(b *testing.B) { run(b, cluster.Config{}, cluster.DefaultDeadline) })
	b.Run("old-defaults", func(b *testing.B) {
		if os.Getenv("CLUSTER_BENCH_OLD_DEFAULTS") == "" {
			b.Skip("about 210 s an answer: set CLUSTER_BENCH_OLD_DEFAULTS=1")
		}
		rc := f.Rest()
		rc.QPS, rc.Burst = 50, 100
		run(b, cluster.Config{Rest: rc, Concurrency: 8, NodeTimeout: 30 * time.Second}, 0)
	})
}

// TestWithDeadline: the deadline's context ends with ErrDeadline as its
// cause; 0 sets none.
func TestWithDeadline(t *testing.T) {
	ctx, cancel := cluster.WithDeadline(t.Context(), 0)
	if _, ok := ctx.Deadline(); ok {
		t.Error("0: a deadline was set")
	}
	cancel()
	ctx, cancel = cluster.WithDeadline(t.Context(), time.Nanosecond)
	defer cancel()
	<-ctx.Done()
	if cause := context.Cause(ctx); !errors.Is(cause, cluster.ErrDeadline) || cause.Error() != "1ns deadline passed" {
		t.Errorf("cause %v, want ErrDeadline", cause)
	}
}
