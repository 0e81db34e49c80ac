package elasticsearch

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"

	"github.com/execid/correlator/pkg/auditlog"
	"github.com/execid/correlator/pkg/capture"
	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/store"
	"github.com/execid/correlator/pkg/vocab"
)

// pathRecorder records each request's method and path.
type pathRecorder struct {
	mu    sync.Mutex
	paths []string
}

func (p *pathRecorder) RoundTrip(r *http.Request) (*http.Response, error) {
	p.mu.Lock()
	p.paths = append(p.paths, r.Method+" "+r.URL.Path)
	p.mu.Unlock()
	return http.DefaultTransport.RoundTrip(r)
}

func (p *pathRecorder) take() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := p.paths
	p.paths = nil
	return out
}

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// proc is a process of session s1 started at t0+sec, exited at t0+exit
// (never when exit < 0).
func proc(id string, sec, exit int) join.Process {
	p := join.Process{Exec: capture.Exec{ProcessID: id, PID: 7, Filename: "/bin/cat", Argv: []string{"cat"}},
		Namespace: "shop", Pod: "web-0", Container: "app", Start: t0.Add(time.Duration(sec) * time.Second),
		AuditID: "s1", Attribution: vocab.AttributionAuditID, Flags: []string{}}
	if exit >= 0 {
		p.Exit, p.ExitCode = t0.Add(time.Duration(exit)*time.Second), new(int)
	}
	return p
}

func minuteStore(t *testing.T, tr http.RoundTripper) *Store {
	t.Helper()
	cfg := clusterConfig(t)
	cfg.IndexPeriod, cfg.Transport = time.Minute, tr
	return openCluster(t, cfg)
}

// TestRetentionCostFollowsIndicesNotDocuments: a pass over three expired
// minute indices sends the same requests whether they hold 30 exited
// processes or 3,000, never a _delete_by_query, and the indices are gone.
// Positive control: the documents are there (counted) before the pass.
func TestRetentionCostFollowsIndicesNotDocuments(t *testing.T) {
	ctx := context.Background()
	var passes [][]string
	for _, n := range []int{30, 3000} {
		rec := &pathRecorder{}
		s := minuteStore(t, rec)
		ps := make([]join.Process, n)
		for i := range ps {
			ps[i] = proc(fmt.Sprintf("p%05d", i), (i%3)*60+i%50, (i%3)*60+55)
		}
		if err := s.Write(ctx, store.Batch{Processes: ps}); err != nil {
			t.Fatal(err)
		}
		if got, err := s.count(ctx, s.n.processes); err != nil || got != int64(n) {
			t.Fatalf("stored %d of %d processes: %v", got, n, err)
		}
		rec.take()
		d, err := s.DeleteOlderThan(ctx, t0.Add(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		if d.Processes != int64(n) {
			t.Errorf("deleted %d processes, want %d", d.Processes, n)
		}
		paths := rec.take()
		for _, p := range paths {
			if strings.Contains(p, "_delete_by_query") {
				t.Errorf("retention sent %s", p)
			}
		}
		var deletes int
		for _, p := range paths {
			if strings.HasPrefix(p, "DELETE /"+s.n.prefix+"-processes-2026") {
				deletes++
			}
		}
		if deletes != 3 {
			t.Errorf("retention deleted %d process indices, want 3: %v", deletes, paths)
		}
		if idx, err := s.periodIndices(ctx, kindProcesses); err != nil || len(idx) != 0 {
			t.Errorf("process indices left: %v, %v", idx, err)
		}
		passes = append(passes, paths)
	}
	if len(passes[0]) != len(passes[1]) {
		t.Errorf("a pass over 30 processes sent %d requests, over 3,000 %d:\n%v\n%v",
			len(passes[0]), len(passes[1]), passes[0], passes[1])
	}
}

// TestRetentionCarriesRunningProcess: an attacker's process that runs
// longer than the window must not age out of the record. Its index is
// dropped, but it is carried; its exit, written after, lands in the index
// its start chose (created again), and the next pass carries that newer
// copy. Once it has exited before the cut, it goes. Positive control: an
// exited process of the same index goes at the first pass.
func TestRetentionCarriesRunningProcess(t *testing.T) {
	ctx := context.Background()
	s := minuteStore(t, nil)
	ss := join.Session{ExecRecord: execRecord("s1", t0), UpdatedAt: t0}
	ss.EndTimestamp = t0.Add(time.Second)
	running, exited := proc("backdoor", 1, -1), proc("ls", 2, 3)
	if err := s.Write(ctx, store.Batch{Sessions: []join.Session{ss}, Processes: []join.Process{running, exited}}); err != nil {
		t.Fatal(err)
	}
	cut := t0.Add(10 * time.Minute)
	d, err := s.DeleteOlderThan(ctx, cut)
	if err != nil {
		t.Fatal(err)
	}
	if d != (store.Deleted{Processes: 1}) {
		t.Errorf("first pass deleted %+v, want the exited process only", d)
	}
	got, err := s.GetSession(ctx, "s1")
	if err != nil {
		t.Fatalf("the running process's session went: %v", err)
	}
	if len(got.Processes) != 1 || got.Processes[0].ProcessID != "backdoor" || !got.Processes[0].Exit.IsZero() {
		t.Fatalf("after the first pass: %+v, want the running process alone", got.Processes)
	}

	// It exits after the cut: written whole to its start's index.
	running.Exit, running.ExitCode = cut.Add(time.Minute), new(int)
	if err := s.Write(ctx, store.Batch{Processes: []join.Process{running}}); err != nil {
		t.Fatal(err)
	}
	if d, err := s.DeleteOlderThan(ctx, cut); err != nil || d != (store.Deleted{}) {
		t.Fatalf("second pass = %+v, %v; want nothing gone", d, err)
	}
	ps, _, err := s.ListProcesses(ctx, store.ProcessFilter{})
	if err != nil || len(ps) != 1 || !ps[0].Exit.Equal(running.Exit) {
		t.Fatalf("after the exit: %+v, %v; want the process once, with its exit", ps, err)
	}
	// Exited before a later cut: it goes, and its session with it.
	d, err = s.DeleteOlderThan(ctx, cut.Add(time.Hour))
	if err != nil || d.Processes != 1 || d.Sessions != 1 {
		t.Fatalf("last pass = %+v, %v; want the process and its session gone", d, err)
	}
	if _, err := s.GetSession(ctx, "s1"); err == nil {
		t.Fatal("session still there")
	}
}

// TestRetentionLeaseOneJobPerCluster: twenty agents due at once make one
// pass; the next due within the interval skip; a holder that died is
// taken over once its lease expires.
func TestRetentionLeaseOneJobPerCluster(t *testing.T) {
	ctx := context.Background()
	cfg := clusterConfig(t)
	cfg.IndexPeriod = time.Minute
	stores := make([]*Store, 20)
	for i := range stores {
		c := cfg
		c.Holder = fmt.Sprintf("agent-%02d", i)
		s, err := Open(ctx, c, zerolog.Nop(), prometheus.NewRegistry())
		if err != nil {
			t.Fatal(err)
		}
		stores[i] = s
	}
	if err := stores[0].Write(ctx, store.Batch{Processes: []join.Process{proc("old", 1, 2)}}); err != nil {
		t.Fatal(err)
	}
	ran := func() (n int) {
		for _, s := range stores {
			n += int(testutil.ToFloat64(s.metrics.passes.WithLabelValues("ran")))
		}
		return n
	}
	var wg sync.WaitGroup
	errs := make([]error, len(stores))
	deleted := make([]store.Deleted, len(stores))
	for i, s := range stores {
		wg.Go(func() { deleted[i], errs[i] = s.RetainOnce(ctx, t0.Add(time.Hour), time.Hour) })
	}
	wg.Wait()
	var total int64
	for i, err := range errs {
		if err != nil {
			t.Fatalf("agent %d: %v", i, err)
		}
		total += deleted[i].Processes
	}
	if ran() != 1 || total != 1 {
		t.Fatalf("%d passes ran, deleting %d processes; want one pass deleting 1", ran(), total)
	}
	if _, err := stores[5].RetainOnce(ctx, t0.Add(time.Hour), time.Hour); err != nil || ran() != 1 {
		t.Fatalf("a pass within the interval ran (%d passes, %v)", ran(), err)
	}

	// A holder that died mid-pass: its lease holds until it expires.
	dead, err := stores[0].c.takeLease(ctx, stores[0].n, leaseDocID, "dead", time.Minute, 0, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	_ = dead // never released
	later := stores[1]
	later.now = func() time.Time { return time.Now().Add(2 * time.Hour) }
	if _, err := later.RetainOnce(ctx, t0, time.Hour); err != nil || ran() != 2 {
		t.Fatalf("lease of a dead holder not taken over after it expired (%d passes, %v)", ran(), err)
	}
}

func execRecord(id string, at time.Time) (r auditlog.ExecRecord) {
	r.AuditID, r.RequestReceivedTimestamp = id, at
	r.User.Username, r.Namespace, r.Pod, r.Stages = "alice", "shop", "web-0", []string{"ResponseComplete"}
	return r
}
