package sqlite

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/store"
)

// BenchmarkQuerySoakCommand is make soak's processes-by-command query on a
// store shaped like its ten minutes of one pod: 3,000 exec sessions, each
// a root `sh -c` line of its own and 50 `/bin/true`, every 13th also a
// `/bin/sleep 5` (its root's line holds it too), all exited, written 300
// processes a transaction as the agent commits them. The search is for
// "/bin/sleep 5" in the pod, 100 a page: 460 processes match, in 230 of
// the store's runs. `go test -run '^$' -bench QuerySoakCommand ./pkg/store/sqlite`
func BenchmarkQuerySoakCommand(b *testing.B) {
	s := soakStore(b)
	ctx := context.Background()
	f := store.ProcessFilter{Command: "/bin/sleep 5", Pod: "runner-0", Limit: 100}
	benchLatency(b, func(int) error {
		page, _, err := s.ListProcesses(ctx, f)
		if err == nil && len(page) != 100 {
			err = fmt.Errorf("%d processes, want a page of 100", len(page))
		}
		return err
	})
}

// BenchmarkQuerySoakSession is make soak's session tree (GetSession) on
// BenchmarkQuerySoakCommand's store: a session of 51 or 52 processes, all
// in runs.
func BenchmarkQuerySoakSession(b *testing.B) {
	s := soakStore(b)
	ctx := context.Background()
	benchLatency(b, func(i int) error {
		d, err := s.GetSession(ctx, fmt.Sprintf("00000000-0000-4000-8000-%012d", 2999-i%100))
		if err == nil && len(d.Processes) < 51 {
			err = fmt.Errorf("%d processes, want 51 or more", len(d.Processes))
		}
		return err
	})
}

// BenchmarkQuerySoakWho is make soak's who (the pod's newest 50 sessions)
// and a user's newest 50 on BenchmarkQuerySoakCommand's store.
func BenchmarkQuerySoakWho(b *testing.B) {
	s := soakStore(b)
	ctx := context.Background()
	for _, f := range []store.SessionFilter{{Namespace: "ci", Pod: "runner-0", Limit: 50}, {User: "soak-3", Limit: 50}} {
		b.Run(map[bool]string{true: "Pod", false: "User"}[f.Pod != ""], func(b *testing.B) {
			benchLatency(b, func(int) error {
				page, _, err := s.ListSessions(ctx, f)
				if err == nil && len(page) != 50 {
					err = fmt.Errorf("%d sessions, want 50", len(page))
				}
				return err
			})
		})
	}
}

// soakStore is the store the soak benchmarks read.
func soakStore(b *testing.B) *Store {
	s := openTest(b)
	ctx := context.Background()
	var batch []join.Process
	var sessions []join.Session
	flush := func() {
		if err := s.Write(ctx, store.Batch{Sessions: sessions, Processes: batch}); err != nil {
			b.Fatal(err)
		}
		batch, sessions = batch[:0], sessions[:0]
	}
	at := base
	for i := range 3000 {
		id := fmt.Sprintf("00000000-0000-4000-8000-%012d", i)
		ss := session(id, fmt.Sprintf("soak-%d", i%16), 0)
		ss.Namespace, ss.Pod, ss.RequestReceivedTimestamp = "ci", "runner-0", at
		sessions = append(sessions, ss)
		line := fmt.Sprintf("i=0; while [ $i -lt %d ]; do /bin/true; usleep %d; i=$((i+1)); done", 20+i%80, 1000+i)
		if i%13 == 0 {
			line += "; /bin/sleep 5"
		}
		argvs := [][]string{{"/bin/sh", "-c", line + "; true"}}
		for range 50 {
			argvs = append(argvs, []string{"/bin/true"})
		}
		if i%13 == 0 {
			argvs = append(argvs, []string{"/bin/sleep", "5"})
		}
		for k, argv := range argvs {
			p := process(fmt.Sprintf("%d-%d", i, k), id, 0)
			p.Namespace, p.Pod, p.Argv = "ci", "runner-0", argv
			p.Start, p.ExecTime = at, at
			p.Exit, p.ExitCode = at.Add(time.Millisecond), ptr(0)
			at = at.Add(3 * time.Millisecond)
			batch = append(batch, p)
			if len(batch) == 300 {
				flush()
			}
		}
	}
	flush()
	return s
}

// benchLatency times q b.N times and reports its p50 and p99.
func benchLatency(b *testing.B, q func(i int) error) {
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		t := time.Now()
		err := q(i)
		lat = append(lat, time.Since(t))
		if err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	slices.Sort(lat)
	pct := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) / 1000 }
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
}
