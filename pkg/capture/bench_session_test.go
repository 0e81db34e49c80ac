package capture

import (
	"bufio"
	"context"
	"database/sql"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	"github.com/execid/correlator/internal/testutil"
)

// sessionBench is an exec session in a runc container under
// /kubepods/burstable/pod<uid>/<id>, running execbench with the host's own
// dynamically linked /bin/true and its libraries copied into the rootfs.
type sessionBench struct {
	c *testutil.Container
}

func newSessionBench(b *testing.B) *sessionBench {
	b.Helper()
	target := overheadTarget(b)
	driver := execBench(b)
	files := map[string]string{"/bin/execbench": driver, target: target, sleepPath: sleepPath}
	for _, lib := range sharedLibs(b, driver, target, sleepPath) {
		real, err := filepath.EvalSymlinks(lib)
		if err != nil {
			b.Fatalf("resolving %s: %v", lib, err)
		}
		files[lib] = real
	}
	return &sessionBench{c: testutil.NewContainer(b, testutil.ContainerConfig{Files: files})}
}

// sharedLibs lists the libraries (and loader) ldd names for bins.
func sharedLibs(b *testing.B, bins ...string) []string {
	b.Helper()
	seen := map[string]bool{}
	var out []string
	for _, bin := range bins {
		res, err := exec.Command("ldd", bin).Output()
		if err != nil {
			b.Fatalf("running ldd %s: %v", bin, err)
		}
		for _, line := range strings.Split(string(res), "\n") {
			for _, f := range strings.Fields(line) {
				if strings.HasPrefix(f, "/") && !seen[f] {
					seen[f] = true
					out = append(out, f)
				}
			}
		}
	}
	return out
}

// run times n execs of /bin/true by execbench, itself exec'd by runc into
// the container with the key in its environment: a session root whose
// every child is captured, joined and stored. id is the session's audit ID.
func (s *sessionBench) run(b *testing.B, id string, n, envBytes int) time.Duration {
	return s.runAt(b, id, n, envBytes, 0)
}

// sleepPath is the host's sleep, copied into the container for execs
// that live (runFor).
const sleepPath = "/bin/sleep"

// runAt is run paced at rate execs a second (0: as fast as they go).
func (s *sessionBench) runAt(b *testing.B, id string, n, envBytes, rate int) time.Duration {
	return s.runFor(b, id, n, envBytes, rate, 0)
}

// runFor is runAt with each exec living life: /bin/sleep, started without
// waiting for the last one to end (0: /bin/true, one after the other).
func (s *sessionBench) runFor(b *testing.B, id string, n, envBytes, rate int, life time.Duration) time.Duration {
	env := []string{keyEnv(id), "EXECBENCH_RATE=" + strconv.Itoa(rate)}
	path := "/bin/true"
	if life > 0 {
		path = sleepPath
		env = append(env, "EXECBENCH_NOWAIT=1", "EXECBENCH_ARG="+strconv.FormatFloat(life.Seconds(), 'f', -1, 64))
	}
	out, err := s.c.Exec(context.Background(),
		[]string{"/bin/execbench", strconv.Itoa(n), strconv.Itoa(envBytes), path, id}, env...)
	if err != nil {
		b.Fatalf("running execbench in the container: %v: %s", err, out)
	}
	ns, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
	if err != nil {
		b.Fatalf("parsing execbench output %q: %v", out, err)
	}
	return time.Duration(ns)
}

// BenchmarkSessionExecOverhead is BenchmarkExecOverhead with the loop in
// an exec session in a pod, the worst case a user meets: every exec and
// exit is sent, joined and stored. Each round is its own session.
// CORRELATOR_BENCH_AGENT=path/to/correlator makes the attached side a
// whole `correlator run` with SQLite, as on a node.
func BenchmarkSessionExecOverhead(b *testing.B) {
	testutil.RequireRoot(b)
	s := newSessionBench(b)
	var side overheadSide
	batch := 200
	if bin := os.Getenv("CORRELATOR_BENCH_AGENT"); bin != "" {
		side = newAgentSide(b, bin)
		batch = 1000
	} else {
		p, _, _ := benchProbe(b)
		side = probeSide{p}
	}
	overheadRounds(b, side, batch, func(n, size int) time.Duration {
		return s.run(b, testutil.RandomUUID(), n, size)
	})
}

// BenchmarkAgentCPU is the agent's own CPU (utime+stime of `correlator
// run`, from /proc/<pid>/stat) per in-session exec of /bin/true with a
// 4 KiB environment, counted from the agent being ready until it has taken
// in every exec and exit and committed a row for each process; with the
// rate the execs came at, the agent's share of one CPU and the rows it
// committed per exec. The execs come paced at 300 a second, and as fast as
// the loop goes (rate=max); rate=300,life=2s execs /bin/sleep 2 instead,
// each outliving the writer's one-second commit gap, so that its exit
// comes after its row was stored. One op is one exec. Needs
// CORRELATOR_BENCH_AGENT.
func BenchmarkAgentCPU(b *testing.B) {
	testutil.RequireRoot(b)
	bin := os.Getenv("CORRELATOR_BENCH_AGENT")
	if bin == "" {
		b.Fatal("BenchmarkAgentCPU measures a whole agent: set CORRELATOR_BENCH_AGENT=path/to/correlator")
	}
	s := newSessionBench(b)
	for _, v := range []struct {
		rate int
		life time.Duration
	}{{300, 0}, {0, 0}, {300, 2 * time.Second}} {
		rate, life := v.rate, v.life
		name := "rate=" + strconv.Itoa(rate)
		if rate == 0 {
			name = "rate=max"
		}
		filename := "/bin/true"
		if life > 0 {
			name += ",life=" + life.String()
			filename = sleepPath
		}
		b.Run(name, func(b *testing.B) {
			side := newAgentSide(b, bin)
			side.attach(b)
			defer side.detach(b)
			pid := side.cmd.Process.Pid
			m0 := side.metrics(b)
			cpu0 := procCPU(b, pid)
			start := time.Now()
			const chunk = 5000
			for i := 0; i < b.N; i += chunk {
				s.runFor(b, testutil.RandomUUID(), min(chunk, b.N-i), 4<<10, rate, life)
			}
			want := float64(b.N)
			// Done once every exec's row holds its exit, read from the
			// store's file: a scrape of /metrics every 10 ms, which this
			// wait used, cost the agent up to a few hundred µs of CPU each
			// (docs/benchmarks.md), charged to the execs.
			db := side.storeReader(b)
			testutil.Eventually(b, "the agent stored every process with its exit", func() bool {
				return side.exitedRows(b, db, filename) >= b.N
			})
			cpu, wall := procCPU(b, pid)-cpu0, time.Since(start)
			if m := side.metrics(b); m[execEvents]-m0[execEvents] < want || m[exitEvents]-m0[exitEvents] < want {
				b.Fatalf("the agent took in %.0f execs and %.0f exits; want %.0f of each",
					m[execEvents]-m0[execEvents], m[exitEvents]-m0[exitEvents], want)
			}
			b.ReportMetric(float64(cpu.Microseconds())/want, "agent-µs/exec")
			// The rate matters: a commit's and a wakeup's cost are shared by
			// the execs that came in meanwhile, so fewer execs a second cost
			// each more.
			b.ReportMetric(want/wall.Seconds(), "execs/s")
			b.ReportMetric(100*cpu.Seconds()/wall.Seconds(), "agent-%cpu")
			m := side.metrics(b)
			b.ReportMetric((m[rowsCommitted]-m0[rowsCommitted])/want, "rows/exec")
		})
	}
}

const (
	execEvents    = `correlator_agent_events_total{kind="exec"}`
	exitEvents    = `correlator_agent_events_total{kind="exit"}`
	rowsCommitted = `correlator_store_rows_total{outcome="committed"}`
)

// metrics scrapes the agent's counters named above.
func (s *agentSide) metrics(b *testing.B) map[string]float64 {
	b.Helper()
	res, err := http.Get("http://" + s.addr + "/metrics")
	if err != nil {
		b.Fatalf("scraping the agent: %v", err)
	}
	defer res.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, v, ok := strings.Cut(sc.Text(), " ")
		if ok && (name == execEvents || name == exitEvents || name == rowsCommitted) {
			out[name], _ = strconv.ParseFloat(v, 64)
		}
	}
	return out
}

// storeReader opens the agent's store read-only, from this process.
func (s *agentSide) storeReader(b *testing.B) *sql.DB {
	b.Helper()
	db, err := sql.Open("sqlite", filepath.Join(s.dir, "correlator.db")+"?_pragma=query_only(1)")
	if err != nil {
		b.Fatalf("opening the agent's store: %v", err)
	}
	b.Cleanup(func() { db.Close() })
	return db
}

// exitedRows is the number of stored execs of filename (runFor's target)
// with their exit; execbench's own rows are not counted. The store is a
// fresh file each attach. An exited process is a processes row, or (from
// schema 9 on) a line of a run, which names its file as JSON: the lines
// are counted in SQL, without decoding the runs, so that the wait costs
// the machine little while the agent commits its last rows.
func (s *agentSide) exitedRows(b *testing.B, db *sql.DB, filename string) int {
	b.Helper()
	var n, runs int
	q := `SELECT count(*) FROM processes WHERE filename = ? AND exit_time IS NOT NULL`
	if err := db.QueryRow(q, filename).Scan(&n); err != nil {
		b.Fatalf("counting the agent's stored processes: %v", err)
	}
	if err := db.QueryRow(`SELECT count(*) FROM sqlite_master WHERE name = 'process_runs'`).Scan(&runs); err != nil {
		b.Fatalf("looking for the agent's runs: %v", err)
	}
	if runs > 0 {
		var inRuns int
		q := `SELECT coalesce(sum((length(body) - length(replace(body, ?1, ''))) / length(?1)), 0) FROM process_runs`
		if err := db.QueryRow(q, `"filename":"`+filename+`"`).Scan(&inRuns); err != nil {
			b.Fatalf("counting the agent's run processes: %v", err)
		}
		n += inRuns
	}
	return n
}

// procCPU is utime+stime of pid, from /proc/<pid>/stat.
func procCPU(b *testing.B, pid int) time.Duration {
	b.Helper()
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		b.Fatalf("reading the agent's stat: %v", err)
	}
	// Fields after the command name, which ends at the last ')'.
	f := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+2:]))
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * time.Second / 100 // USER_HZ
}
