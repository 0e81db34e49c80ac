package elasticsearch

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"

	itest "github.com/execid/correlator/internal/testutil"
	"github.com/execid/correlator/pkg/auditlog"
	"github.com/execid/correlator/pkg/capture"
	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/store"
)

// BenchmarkFleetBulk runs 1, 10 and 100 agents, each at 300 execs/s (a
// start, then its exit 50 ms later, as two writes of one process) for
// FLEET_BENCH_SECONDS (default 20), and reports what the cluster accepted:
// execs whose exit was acknowledged, bulk items, the p99 of one agent's
// commit (Store.Write), items and requests retried for load, and rows the
// writers dropped or never took (events still waiting to be added when
// the time was up). Run with -benchtime 1x: each run is one window.
func BenchmarkFleetBulk(b *testing.B) {
	window := time.Duration(fleetEnv(b, "FLEET_BENCH_SECONDS", 20)) * time.Second
	for _, n := range []int{1, 10, 100} {
		b.Run(fmt.Sprintf("agents=%d", n), func(b *testing.B) { benchFleetBulk(b, n, window) })
	}
}

func benchFleetBulk(b *testing.B, agents int, window time.Duration) {
	const rate = 300
	cfg := clusterConfig(b)
	// The agent's own settings: no wait for the refresh, default backoff
	// and session size.
	cfg.Refresh, cfg.RetryInitial, cfg.SessionProcessLimit = "false", 0, 0
	var counts fleetCounts
	openCluster(b, cfg) // installs the templates once, before the fleet
	fleet := openFleet(b, cfg, agents, &counts, false)
	var wg sync.WaitGroup
	tooMany0, bulks0 := counts.tooMany.Load(), counts.bulks.Load()
	b.ResetTimer()
	ctx, cancel := context.WithTimeout(context.Background(), window)
	defer cancel()
	drivers := make([]*execDriver, agents)
	start := time.Now()
	for i, a := range fleet {
		drivers[i] = &execDriver{a: a, rate: rate, exitAfter: 50 * time.Millisecond}
		wg.Go(func() { drivers[i].run(ctx) })
	}
	// The rates are of the steady state: from the end of the warm-up, when
	// every writer has committed once (a first commit waits its one-second
	// gap), to the end.
	itest.EventuallyWithin(b, window, "every agent's writer committed once", func() bool {
		for _, a := range fleet {
			if a.commits.Load() == 0 {
				return false
			}
		}
		return true
	})
	warm := time.Since(start)
	var rows0, execs0 int64
	for _, a := range fleet {
		rows0, execs0 = rows0+a.rows.Load(), execs0+a.execs.Load()
	}
	wg.Wait()
	el := time.Since(start)
	var rows, execs, due, done int64
	for i, a := range fleet {
		rows, execs = rows+a.rows.Load(), execs+a.execs.Load()
		due, done = due+drivers[i].due, done+drivers[i].done
	}
	rows, execs = rows-rows0, execs-execs0
	b.StopTimer()
	drainStart := time.Now()
	for _, a := range fleet {
		wg.Go(func() { _ = a.w.Close() })
	}
	wg.Wait()
	drain := time.Since(drainStart)
	var lat []time.Duration
	var dropped, failures, maxBlock int64
	var retried float64
	for i, a := range fleet {
		for _, w := range a.writes {
			if w.at.Before(start.Add(window)) {
				lat = append(lat, w.took)
			}
		}
		st := a.w.Stats()
		dropped, failures = dropped+st.Dropped, failures+st.Failures
		retried += promtest.ToFloat64(a.s.metrics.bulk.items.WithLabelValues("retried"))
		maxBlock = max(maxBlock, int64(drivers[i].maxBlock))
	}
	secs := (el - warm).Seconds()
	b.ReportMetric(float64(agents*rate), "offered-execs/s")
	b.ReportMetric(float64(execs)/secs, "execs/s")
	b.ReportMetric(float64(rows)/secs, "rows/s")
	b.ReportMetric(fleetMS(fleetPct(lat, 0.99)), "p99-write-ms")
	b.ReportMetric(retried, "items-retried")
	b.ReportMetric(float64(counts.tooMany.Load()-tooMany0), "http-429")
	b.ReportMetric(float64(dropped), "rows-dropped")
	b.ReportMetric(float64(due-done), "events-backlog")
	b.ReportMetric(fleetMS(time.Duration(maxBlock)), "max-add-ms")
	b.Logf("%d agents x %d execs/s for %s (rates after %s): %d execs acknowledged with their exit (%.0f/s), "+
		"%d rows; %d commits (p50 %.0f ms, p99 %.0f ms, %d failed); events due %d, added %d (backlog %d, "+
		"longest Add %s); %.0f items and %d whole requests retried for load; %d rows dropped; writers drained "+
		"in %s; %d bulk requests",
		agents, rate, el.Round(time.Millisecond), warm, execs, float64(execs)/secs, rows, len(lat),
		fleetMS(fleetPct(lat, 0.5)), fleetMS(fleetPct(lat, 0.99)), failures, due, done, due-done,
		time.Duration(maxBlock).Round(time.Millisecond), retried, counts.tooMany.Load()-tooMany0, dropped,
		drain.Round(time.Millisecond), counts.bulks.Load()-bulks0)
}

// The fleet query benchmark's data set: qSessions exec sessions over
// qDays days from qBase, by qUsers users into qPods pods; process i belongs
// to session i%qSessions, whose processes form a tree (each parented by
// the session's process (k-1)/4); a tenth of the sessions have one in a
// thousand of their processes still running, which retention carries, and
// with them their sessions.
const (
	qSessions = 1000
	qDays     = 4
	qUsers    = 50
	qPods     = 100
)

var qBase = time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)

func qSessionStart(j int) time.Time {
	return qBase.Add(time.Duration(j) * qDays * 24 * time.Hour / qSessions)
}

// qProcStart is when process k of session j started: 10 ms apart, so a
// session of 10,000 processes spans 100 s, within its day.
func qProcStart(j, k int) time.Time {
	return qSessionStart(j).Add(time.Second + time.Duration(k)*10*time.Millisecond)
}

func qProcID(j, k int) string {
	return capture.ProcessKey(uint32(4096+k%60000), uint64(qProcStart(j, k).UnixNano()))
}

func qUser(j int) string { return fmt.Sprintf("user%02d@example.com", j%qUsers) }

func qAuditID(j int) string { return fleetAuditID(999, j) }

func qSession(j int) (join.Session, []store.AuditRecord) {
	ns, pod := fleetPodName(j % qPods)
	recv, end := qSessionStart(j), qSessionStart(j).Add(15*time.Minute)
	uri := "/api/v1/namespaces/" + ns + "/pods/" + pod + "/exec?command=sh&container=app&stdin=true&tty=true"
	yes := true
	ss := join.Session{ExecRecord: auditlog.ExecRecord{
		AuditID: qAuditID(j), Stages: []string{"RequestReceived", "ResponseStarted", "ResponseComplete"},
		Verb: "create", Subresource: "exec",
		User: auditlog.UserInfo{Username: qUser(j), UID: fmt.Sprintf("uid-%02d", j%qUsers),
			Groups: []string{"system:authenticated", "team-" + ns}},
		SourceIPs: []string{"10.0.12.7"}, UserAgent: "kubectl/v1.35.0 (linux/amd64) kubernetes/66452b1",
		Namespace: ns, Pod: pod, Container: "app", Command: []string{"sh"}, Stdin: &yes, TTY: &yes,
		Code: 101, Decision: "allow", Reason: `RBAC: allowed by ClusterRoleBinding "oncall" of ClusterRole "exec"`,
		RequestURI: uri, RequestReceivedTimestamp: recv, EndTimestamp: end,
		Annotations: map[string]string{"authorization.k8s.io/decision": "allow"},
	}, UpdatedAt: end}
	var recs []store.AuditRecord
	for i, stage := range ss.Stages {
		at := recv.Add(time.Duration(i) * 7 * time.Minute)
		ev := fmt.Sprintf(`{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":%q,"stage":%q,`+
			`"requestURI":%q,"verb":"create","user":{"username":%q,"groups":["system:authenticated"]},"sourceIPs":["10.0.12.7"],`+
			`"objectRef":{"resource":"pods","namespace":%q,"name":%q,"apiVersion":"v1","subresource":"exec"},`+
			`"requestReceivedTimestamp":%q,"stageTimestamp":%q}`, ss.AuditID, stage, uri, qUser(j), ns, pod,
			recv.Format(time.RFC3339Nano), at.Format(time.RFC3339Nano))
		recs = append(recs, store.AuditRecord{AuditID: ss.AuditID, Stage: stage, StageTimestamp: at, Event: []byte(ev)})
	}
	return ss, recs
}

// qProcess is process i of the data set.
func qProcess(i int) join.Process {
	j, k := i%qSessions, i/qSessions
	parent := capture.ProcessKey(1, uint64(qSessionStart(j).UnixNano()))
	if k > 0 {
		parent = qProcID(j, (k-1)/4)
	}
	start := qProcStart(j, k)
	p := fleetProcess(qProcID(j, k), parent, qProcID(j, 0), qAuditID(j), uint32(4096+k%60000), j%qPods, k, start)
	if k%1000 != 7 || j%10 != 0 { // a tenth of the sessions left one in a thousand running
		code := k % 3 / 2
		p.Exit, p.ExitCode = start.Add(50*time.Millisecond+time.Duration(k%20)*100*time.Millisecond), &code
	}
	return p
}

// BenchmarkFleetQuery loads FLEET_BENCH_PROCESSES processes (default
// 1,000,000) through Store.Write in batches of 4,000 from four goroutines,
// then measures FLEET_BENCH_QUERIES (default 200) of each query the
// plugin's Elasticsearch source asks: who (sessions into a pod), sessions
// by user, and a session with its process tree; then one retention pass
// that drops the first two of the four days. Run with -benchtime 1x.
func BenchmarkFleetQuery(b *testing.B) {
	n := fleetEnv(b, "FLEET_BENCH_PROCESSES", 1_000_000)
	queries := fleetEnv(b, "FLEET_BENCH_QUERIES", 200)
	cfg := clusterConfig(b)
	var counts fleetCounts
	cfg.Transport = newFleetTransport(&counts)
	cfg.Refresh, cfg.RetryInitial, cfg.SessionProcessLimit = "false", 0, 0
	s := openCluster(b, cfg)
	ctx := context.Background()
	b.ResetTimer()

	load := time.Now()
	var sessions []join.Session
	var recs []store.AuditRecord
	for j := range qSessions {
		ss, rs := qSession(j)
		sessions, recs = append(sessions, ss), append(recs, rs...)
	}
	if err := s.Write(ctx, store.Batch{Sessions: sessions, AuditRecords: recs}); err != nil {
		b.Fatalf("writing sessions: %v", err)
	}
	const batch, loaders = 4000, 4
	var next, loaded atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, loaders)
	for range loaders {
		wg.Go(func() {
			ps := make([]join.Process, 0, batch)
			for {
				lo := int(next.Add(batch)) - batch
				if lo >= n {
					return
				}
				ps = ps[:0]
				for i := lo; i < min(lo+batch, n); i++ {
					ps = append(ps, qProcess(i))
				}
				if err := s.Write(ctx, store.Batch{Processes: ps}); err != nil {
					errs <- err
					return
				}
				if done := loaded.Add(int64(len(ps))); testing.Verbose() && done/int64(batch)%250 == 0 {
					fmt.Fprintf(os.Stderr, "loaded %d of %d processes in %s\n", done, n, time.Since(load).Round(time.Second))
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatalf("loading processes: %v", err)
	}
	if err := s.c.do(ctx, http.MethodPost, "/"+cfg.IndexPrefix+"-*/_refresh", nil, nil, nil); err != nil {
		b.Fatalf("refreshing: %v", err)
	}
	loadTook := time.Since(load)
	if got, err := s.count(ctx, s.n.processes); err != nil || got != int64(n) {
		b.Fatalf("count after loading = %d, %v; want %d", got, err, n)
	}

	type size struct {
		Store struct {
			Bytes int64 `json:"size_in_bytes"`
		} `json:"store"`
	}
	var st struct {
		All struct {
			Primaries size `json:"primaries"`
			Total     size `json:"total"`
		} `json:"_all"`
	}
	if err := s.c.do(ctx, http.MethodGet, "/"+s.n.processes+"/_stats/store", nil, nil, &st); err != nil {
		b.Fatalf("reading the store size: %v", err)
	}
	perSession := min((n+qSessions-1)/qSessions, s.cfg.SessionProcessLimit)
	kinds := []struct {
		name string
		want func(got int) bool
		run  func(j int) (int, error)
	}{
		{"who", func(got int) bool { return got == qSessions/qPods }, func(j int) (int, error) {
			ns, pod := fleetPodName(j % qPods)
			ss, _, err := s.ListSessions(ctx, store.SessionFilter{Namespace: ns, Pod: pod, Limit: 100})
			return len(ss), err
		}},
		{"user", func(got int) bool { return got == qSessions/qUsers }, func(j int) (int, error) {
			ss, _, err := s.ListSessions(ctx, store.SessionFilter{User: qUser(j), Limit: 100})
			return len(ss), err
		}},
		{"tree", func(got int) bool { return got >= perSession-1 && got <= perSession }, func(j int) (int, error) {
			d, err := s.GetSession(ctx, qAuditID(j))
			return len(d.Processes), err
		}},
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, k := range kinds {
		var took []time.Duration
		req0 := counts.requests.Load()
		for q := range queries + 5 {
			j := rng.IntN(qSessions)
			t := time.Now()
			got, err := k.run(j)
			if err != nil || !k.want(got) {
				b.Fatalf("%s query of session %d: %d rows, %v", k.name, j, got, err)
			}
			if q >= 5 { // the first five warm up
				took = append(took, time.Since(t))
			}
		}
		reqs := float64(counts.requests.Load()-req0) / float64(queries+5)
		b.ReportMetric(fleetMS(fleetPct(took, 0.5)), k.name+"-p50-ms")
		b.ReportMetric(fleetMS(fleetPct(took, 0.99)), k.name+"-p99-ms")
		b.Logf("%s: %d queries, p50 %.1f ms, p99 %.1f ms, max %.1f ms, %.1f requests a query", k.name, queries,
			fleetMS(fleetPct(took, 0.5)), fleetMS(fleetPct(took, 0.99)), fleetMS(took[len(took)-1]), reqs)
	}

	cut := qBase.Add(qDays / 2 * 24 * time.Hour)
	req0, bulk0 := counts.requests.Load(), counts.bulks.Load()
	t := time.Now()
	d, err := s.DeleteOlderThan(ctx, cut)
	retTook := time.Since(t)
	if err != nil {
		b.Fatalf("DeleteOlderThan: %v", err)
	}
	reqs := counts.requests.Load() - req0
	left, err := s.count(ctx, s.n.processes)
	if err != nil || left != int64(n)-d.Processes || d.Processes < int64(n)/3 {
		b.Fatalf("retention dropped %d processes of %d, %d left (%v)", d.Processes, n, left, err)
	}
	b.StopTimer()
	b.ReportMetric(float64(n)/loadTook.Seconds(), "load-docs/s")
	b.ReportMetric(retTook.Seconds(), "retention-s")
	b.ReportMetric(float64(reqs), "retention-requests")
	b.ReportMetric(float64(st.All.Primaries.Store.Bytes)/float64(n), "bytes/process")
	b.Logf("loaded %d processes, %d sessions, %d audit records in %s (%.0f processes/s), processes %.0f MiB in "+
		"primaries, %.0f MiB with replicas; retention before %s: %s, "+
		"%d requests (%d bulk), dropped %d processes, %d sessions, %d audit records; %d processes left",
		n, qSessions, len(recs), loadTook.Round(time.Second), float64(n)/loadTook.Seconds(),
		float64(st.All.Primaries.Store.Bytes)/(1<<20), float64(st.All.Total.Store.Bytes)/(1<<20), cut.Format(time.DateOnly),
		retTook.Round(time.Millisecond), reqs, counts.bulks.Load()-bulk0, d.Processes, d.Sessions, d.AuditRecords, left)
}
