package sqlite

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
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
// the store's runs. Its context can be cancelled, as an API request's
// can. `go test -run '^$' -bench QuerySoakCommand ./pkg/store/sqlite`
func BenchmarkQuerySoakCommand(b *testing.B) {
	d := soakStore(b)
	f := store.ProcessFilter{Command: "/bin/sleep 5", Pod: "runner-0", Limit: 100}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	runBenchQueries(b, d, []benchQuery{{"Page", func(*rand.Rand) (int, error) {
		page, _, err := d.store.ListProcesses(ctx, f)
		if err == nil && len(page) != 100 {
			err = fmt.Errorf("%d processes, want a page of 100", len(page))
		}
		return len(page), err
	}}})
}

// BenchmarkQuerySoakSession is make soak's session tree (GetSession) on
// BenchmarkQuerySoakCommand's store: a session of 51 or 52 processes, all
// in runs.
func BenchmarkQuerySoakSession(b *testing.B) {
	d := soakStore(b)
	runBenchQueries(b, d, []benchQuery{{"Tree", func(rng *rand.Rand) (int, error) {
		s, err := d.store.GetSession(context.Background(), fmt.Sprintf("00000000-0000-4000-8000-%012d", 2999-rng.IntN(100)))
		if err == nil && len(s.Processes) < 51 {
			err = fmt.Errorf("%d processes, want 51 or more", len(s.Processes))
		}
		return len(s.Processes), err
	}}})
}

// BenchmarkQuerySoakWho is make soak's who (the pod's newest 50 sessions)
// and a user's newest 50 on BenchmarkQuerySoakCommand's store.
func BenchmarkQuerySoakWho(b *testing.B) {
	d := soakStore(b)
	var qs []benchQuery
	for name, f := range map[string]store.SessionFilter{"Pod": {Namespace: "ci", Pod: "runner-0", Limit: 50}, "User": {User: "soak-3", Limit: 50}} {
		qs = append(qs, benchQuery{name, func(*rand.Rand) (int, error) {
			page, _, err := d.store.ListSessions(context.Background(), f)
			if err == nil && len(page) != 50 {
				err = fmt.Errorf("%d sessions, want 50", len(page))
			}
			return len(page), err
		}})
	}
	runBenchQueries(b, d, qs)
}

// BenchmarkQuerySoakAfterWrite is make soak's queries each right after a
// commit, as on a node where the writer commits every few milliseconds:
// SQLite drops a connection's page cache when another wrote, so each query
// reads its pages again.
func BenchmarkQuerySoakAfterWrite(b *testing.B) {
	d := soakStore(b)
	write := func(i int) {
		p := process(fmt.Sprintf("w-%d", i), "00000000-0000-4000-8000-000000000001", 0)
		p.Namespace, p.Pod, p.Argv, p.Start = "ci", "runner-1", []string{"/bin/true"}, base.Add(time.Hour)
		if err := d.store.Write(context.Background(), store.Batch{Processes: []join.Process{p}}); err != nil {
			b.Fatal(err)
		}
	}
	runBenchQueriesAfter(b, d, soakQueries(d), write)
}

// soakQueries are make soak's who, tree and command search on soakStore.
func soakQueries(d *benchData) []benchQuery {
	cmd := store.ProcessFilter{Command: "/bin/sleep 5", Pod: "runner-0", Limit: 100}
	who := store.SessionFilter{Namespace: "ci", Pod: "runner-0", Limit: 50}
	return []benchQuery{
		{"Who", func(*rand.Rand) (int, error) {
			page, _, err := d.store.ListSessions(context.Background(), who)
			return len(page), err
		}},
		{"Tree", func(rng *rand.Rand) (int, error) {
			s, err := d.store.GetSession(context.Background(), fmt.Sprintf("00000000-0000-4000-8000-%012d", 2999-rng.IntN(100)))
			return len(s.Processes), err
		}},
		{"Command", func(*rand.Rand) (int, error) {
			page, _, err := d.store.ListProcesses(context.Background(), cmd)
			return len(page), err
		}},
	}
}

// soakStore is the store the soak benchmarks read.
func soakStore(b *testing.B) *benchData {
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
	fi, err := os.Stat(s.path)
	if err != nil {
		b.Fatal(err)
	}
	return &benchData{store: s, size: float64(fi.Size()) / (1 << 20)}
}
