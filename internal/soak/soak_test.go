package soak

import (
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/execid/correlator/internal/testutil"
)

// TestSoak is make soak: the real agent (BPF, runc containers, SQLite on
// its own disk, the webhook, a file alert sink) under a busy node's load
// for SOAK_DURATION (three minutes in make test and CI; make soak, an
// hour). It writes samples.csv, events.csv, queries.csv, soak.svg and
// figures.txt to SOAK_OUT, prints the figures, and fails on a missed
// target (the slope and CPU targets only in runs of 30 minutes or more).
func TestSoak(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.EnsureBPFFS(t)
	d := envDuration(t, "SOAK_DURATION", 3*time.Minute)
	long := d >= 30*time.Minute
	cfg := Config{
		Duration:  d,
		Sample:    envDuration(t, "SOAK_SAMPLE", 5*time.Second),
		Rate:      float64(envInt(t, "SOAK_RATE", 300)),
		Slots:     envInt(t, "SOAK_SESSIONS", 8),
		Retention: envDuration(t, "SOAK_RETENTION", map[bool]time.Duration{false: 2 * time.Minute, true: 10 * time.Minute}[long]),
		// Ten minutes of retention at 300 execs/s hold about 130 MiB.
		StoreMiB:  envInt(t, "SOAK_STORE_MB", map[bool]int{false: 256, true: 512}[long]),
		Dir:       t.TempDir(),
		AgentArgs: strings.Fields(os.Getenv("SOAK_AGENT_ARGS")),
		Log:       t.Logf,
		TimerBin:  os.Args[0],
		LongRun:   long,
	}
	cfg.WarmUp = envDuration(t, "SOAK_WARMUP", warmUp(d, long, cfg.Retention))
	out := os.Getenv("SOAK_OUT")
	if out == "" {
		out = t.TempDir()
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg.Bin = buildAgent(t)
	// The load runs in BestEffort pods and the agent in the DaemonSet's
	// Burstable pod, with the kubelet's CPU shares (KubeletQoS): two cores
	// saturated by runc, which a node's many cores would spread, weigh
	// against the agent as a node's pods do. runc itself, outside the
	// pods, runs at nice 10 (SOAK_LOAD_NICE; 0: the agent's own).
	qos, err := KubeletQoS(t)
	if err != nil {
		// The figures still hold, the agent only weighing as much as
		// the load's pods: say so in every report.
		qos = QoS{LoadQoS: "burstable", Describe: "without the kubelet's CPU shares: " + err.Error()}
	}
	cfg.AgentProcs = qos.AgentProcs
	loadNice := envIntIn(t, "SOAK_LOAD_NICE", 10, 0, 19)
	for i, name := range []string{"runner-0", "runner-1"} {
		c := testutil.NewContainer(t, testutil.ContainerConfig{QoS: qos.LoadQoS})
		c.Nice = loadNice
		cfg.Pods = append(cfg.Pods, pod{ctr: c, namespace: "ci", name: name, ctrName: fmt.Sprintf("step-%d", i)})
	}
	t.Logf("soak: %s at %.0f execs/s in %d sessions (%s; runc at nice %d), retention %s, a %d MiB store disk; out %s",
		d, cfg.Rate, cfg.Slots, qos.Describe, loadNice, cfg.Retention, cfg.StoreMiB, out)

	res, err := Run(context.Background(), t, cfg)
	if res != nil {
		writeOutputs(t, out, res, cfg)
	}
	if err != nil {
		t.Fatalf("soak: %v", err)
	}
	figs := Summarize(res.Samples, res.Events, cfg.WarmUp, res.QueryP99)
	extra := fmt.Sprintf("sessions %d (%d without an ID), exec errors %d, webhook retries %d, agents %d, "+
		"retention passes that deleted %d, acknowledged never attributed %d, %s, runc at nice %d",
		res.Sessions, res.IDless, res.ExecErrors, res.PostRetries, res.Agents, res.RetentionPasses, res.Unattributed,
		qos.Describe, loadNice)
	tg := DefaultTargets()
	tg.MaxStoreMiB = float64(cfg.StoreMiB) / 2
	tg.MaxStoreSlopeMiBPerHour = 8
	tg.MaxWALMiB = 64
	waits, unknown := timerWaits(res.Queries)
	slow := time.Duration(tg.MaxQueryP99MS * float64(time.Millisecond))
	agentWait, agentUnknown := agentWaits(res.Queries, slow)
	agentRan, _ := agentRuns(res.Queries, slow)
	text := figs.String() + "\n" + tg.Report(figs, long) + "\n" + extra + "\n" +
		fmt.Sprintf("queries by kind, at the client (%q, a request that does no work, not in the query p99):\n%s%sthe timer's own wait for a CPU within its queries (at nice %d): %s, "+
			"%d not read\nthe agent's threads' wait for a CPU, all of them, within the queries over %v: %s, %d not read; "+
			"their time on a CPU: %s\n"+
			"the agents' own query p99 (correlator_api_request_seconds, every query including the verifier's): "+
			"%.2f ms; by route (session: the verifier's too): %s ms\n%s\nfirst exec error: %s\n",
			controlKind, formatKinds(res.QueryByKind), formatFirstBytes(res.Queries), timerNice, waits, unknown, slow, agentWait, agentUnknown, agentRan,
			res.AgentQueryP99, formatRoutes(res.AgentRouteP99), formatPasses(res.Passes, passOverlap(res.Queries, res.Passes, slow), slow),
			res.ExecErr)
	if err := os.WriteFile(filepath.Join(out, "figures.txt"), []byte(text), 0o644); err != nil {
		t.Error(err)
	}
	fmt.Printf("\n%s\n", text)

	for _, f := range tg.Check(figs, long) {
		t.Errorf("target missed: %s", f)
	}
	for _, id := range res.LostIDs {
		t.Errorf("acknowledged and lost: %s", id)
	}
	// The load was what it claims: without these the figures say nothing.
	if !(figs.ExecRateMedian >= 0.7*cfg.Rate) { // NaN too: no exec was ever seen
		t.Errorf("median exec rate %.0f/s, not the %.0f/s asked for", figs.ExecRateMedian, cfg.Rate)
	}
	if res.Agents != 3 {
		t.Errorf("%d agents ran, want 3 (start, upgrade, restart after kill -9)", res.Agents)
	}
	// fillDisk wrote until ENOSPC: the disk was full. Whether the store
	// felt it depends on its free pages (a store at its retention's size
	// reuses those retention freed, as the hour's run did).
	t.Logf("the store said it could not write while the disk was full: %v", res.SawUnwritable)
	if res.RetentionPasses < 2 {
		t.Errorf("retention deleted rows %d times, want several", res.RetentionPasses)
	}
	if len(res.Passes) != res.RetentionPasses {
		t.Errorf("%d of %d retention passes logged their span", len(res.Passes), res.RetentionPasses)
	}
	// Requests without an ID are the heuristic's, not looked up.
	if withID := figs.Acked - res.IDless; withID <= 0 || figs.Verified < withID {
		t.Errorf("acknowledged %d with an ID, verified %d: every one must be looked up and found", withID, figs.Verified)
	}
	if res.Unattributed*100 > figs.Acked {
		t.Errorf("%d of %d acknowledged sessions never had their root attributed", res.Unattributed, figs.Acked)
	}
	if figs.QueryFails > 0 {
		t.Errorf("%d queries failed while an agent ran; last: %s", figs.QueryFails, res.QueryErr)
	}
}

func writeOutputs(t *testing.T, out string, res *Result, cfg Config) {
	files := map[string]func(*os.File) error{
		"samples.csv": func(f *os.File) error { return WriteCSV(f, res.Samples) },
		"events.csv":  func(f *os.File) error { return WriteEventsCSV(f, res.Events) },
		"queries.csv": func(f *os.File) error { return WriteQueriesCSV(f, res.Queries) },
		"soak.svg": func(f *os.File) error {
			return DrawSVG(f, res.Samples, res.Events, fmt.Sprintf("correlator soak: %s at %.0f execs/s", cfg.Duration, cfg.Rate))
		},
	}
	for name, write := range files {
		f, err := os.Create(filepath.Join(out, name))
		if err != nil {
			t.Error(err)
			continue
		}
		if err := write(f); err != nil {
			t.Errorf("writing %s: %v", name, err)
		}
		f.Close()
	}
	for g := 1; g <= res.Agents; g++ {
		name := fmt.Sprintf("agent-%d.log", g)
		if err := copyLogTail(filepath.Join(cfg.Dir, name), filepath.Join(out, name), maxLogCopy); err != nil {
			t.Error(err)
		}
	}
}

// buildAgent builds correlator, or takes CORRELATOR_SOAK_BIN's.
func buildAgent(t *testing.T) string {
	if b := os.Getenv("CORRELATOR_SOAK_BIN"); b != "" {
		return b
	}
	bin := filepath.Join(t.TempDir(), "correlator")
	cmd := exec.Command("go", "build", "-o", bin, "../../cmd/correlator")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building correlator: %v\n%s", err, out)
	}
	return bin
}

func envDuration(t *testing.T, name string, def time.Duration) time.Duration {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		t.Fatalf("%s=%q: want a positive duration", name, v)
	}
	return d
}

func envInt(t *testing.T, name string, def int) int { return envIntIn(t, name, def, 1, math.MaxInt) }

// envIntIn is the integer name holds, def when unset, refused outside lo..hi.
func envIntIn(t *testing.T, name string, def, lo, hi int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		t.Fatalf("%s=%q: want an integer from %d to %d", name, v, lo, hi)
	}
	return n
}

// warmUp is what each agent's figures leave out: a sixth of a short run;
// in a long one, the time its windows take to fill, twice the late window
// (the retention, node.LateWindow): the ID-less sessions' processes are
// held for it, and the records and roots they read leave the join after
// them (the fifth hour: the last agent's heap stopped growing between its
// 17th and 22nd minutes).
func warmUp(d time.Duration, long bool, retention time.Duration) time.Duration {
	if long {
		return max(2*retention, 5*time.Minute)
	}
	return min(d/6, 5*time.Minute)
}

// TestMain serves as the soak's query timer when asked (timer.go).
func TestMain(m *testing.M) {
	if os.Getenv(timerEnv) == "1" {
		if err := ServeTimer(os.Stdin, os.Stdout, os.Stderr); err != nil {
			fmt.Fprintln(os.Stderr, "query timer:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}
