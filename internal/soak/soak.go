package soak

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/execid/correlator/pkg/api"
)

// Config is one soak's settings (make soak's SOAK_* variables).
type Config struct {
	Bin      string        // the correlator binary under test
	Duration time.Duration // how long the load runs
	Sample   time.Duration // between two samples
	WarmUp   time.Duration // left out of the figures, and after each restart
	// LongRun moves the restarts earlier (chaos): a long run's warm-up
	// is twice its late window.
	LongRun   bool
	Rate      float64       // sustained execs/s on the node
	Slots     int           // concurrent exec sessions
	Retention time.Duration // --retention: short, so it runs many times
	StoreMiB  int           // the store's disk (a tmpfs), filled mid-run
	Dir       string        // the agent's files and logs
	Pods      []pod
	AgentArgs []string // more flags for every agent (SOAK_AGENT_ARGS), e.g. --pprof-listen
	// AgentProcs are the cgroup.procs files each agent joins (QoS).
	AgentProcs []string
	TimerBin   string // run with CORRELATOR_SOAK_TIMER=1, it serves ServeTimer (the test binary)
	Log        func(format string, args ...any)
}

// Result is what a soak recorded.
type Result struct {
	Samples  []Sample
	Events   []Event
	QueryP99 float64 // ms, over every query of the run
	// AgentQueryP99 is the agents' own p99 (correlator_api_request_seconds,
	// every API query including the verifier's), ms: without the client's
	// process and the network.
	AgentQueryP99 float64
	// AgentRouteP99 is each route's (processes: the command search alone).
	AgentRouteP99 map[string]float64

	Sessions, IDless, ExecErrors, PostRetries int64
	Unattributed                              int64
	LostIDs                                   []string
	QueryErr                                  string // the last failed query's error
	QueryByKind                               map[string]KindLatency
	Queries                                   []Query // every timed query (queries.csv)
	ExecErr                                   string  // the first failed session's error
	SawUnwritable                             bool    // the store said it could not write while the disk was full
	RetentionPasses                           int     // passes that deleted something, from the agents' logs
	Passes                                    []Pass  // those of them whose span the log gave
	Agents                                    int
}

// Run drives the agent for cfg.Duration and returns what it recorded. t
// gives the containers their cleanup; an error is the soak's own failure
// (an agent that would not start or stop), not a missed target.
func Run(ctx context.Context, t testing.TB, cfg Config) (*Result, error) {
	es, err := checkQuiet(cfg.LongRun)
	if err != nil {
		return nil, err
	}
	if len(es) > 0 {
		cfg.Log("soak: beside Elasticsearch nodes (PIDs %s): a short run's latency is not judged", strings.Join(es, ", "))
	}
	storeDir := filepath.Join(cfg.Dir, "store")
	if err := mountTmpfs(t, storeDir, cfg.StoreMiB); err != nil {
		return nil, err
	}
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	podMap := filepath.Join(cfg.Dir, "pods.json")
	if err := writePodMap(podMap, cfg.Pods); err != nil {
		return nil, err
	}
	pin := soakPinPrefix + strconv.Itoa(os.Getpid())
	t.Cleanup(func() { os.RemoveAll(pin) })
	db := filepath.Join(storeDir, "correlator.db")
	ag := &agents{bin: cfg.Bin, base: "http://" + addr, logs: cfg.Dir, procs: cfg.AgentProcs, args: []string{"run",
		"--listen", addr, "--insecure-no-auth", "--store", "sqlite:" + db, "--pod-map", podMap,
		"--pin-path", pin, "--retention", cfg.Retention.String(),
		"--alert-sink", "file:" + filepath.Join(cfg.Dir, "alerts.jsonl"),
		"--alert-spool-dir", filepath.Join(cfg.Dir, "spool"),
		"--audit-checkpoint-dir", filepath.Join(cfg.Dir, "ckpt")}}
	ag.args = append(ag.args, cfg.AgentArgs...)
	if _, err := ag.start(time.Minute); err != nil {
		return nil, err
	}
	defer func() {
		if ag.current() != nil {
			ag.stop(syscall.SIGTERM, time.Minute)
		}
	}()

	client := &api.Client{BaseURL: ag.base, HTTP: &http.Client{Timeout: 10 * time.Second}}
	l := &load{pods: cfg.Pods, webhook: ag.base + api.WebhookPath, rate: cfg.Rate}
	l.gap.Store(int64(float64(cfg.Slots) * 1e6 / cfg.Rate))
	tm, err := startTimer(cfg.TimerBin)
	if err != nil {
		return nil, err
	}
	defer tm.close()
	start := time.Now()
	q := &queries{base: ag.base, timer: tm, load: l, start: start, up: func() bool { return ag.current() != nil },
		agentPID: ag.currentPID}
	v := &verifier{client: client, load: l, settle: 10 * time.Second, giveUp: 90 * time.Second}
	s := &sampler{cfg: cfg, ag: ag, db: db, q: q, v: v, l: l, start: start}

	runCtx, stop := context.WithTimeout(ctx, cfg.Duration)
	defer stop()
	var wg sync.WaitGroup
	wg.Go(func() { l.run(runCtx, cfg.Slots) })
	wg.Go(func() { l.pace(runCtx, 5*time.Second, s.execRate) })
	wg.Go(func() { q.run(runCtx, 2*time.Second) })
	wg.Go(func() { v.run(runCtx, 250*time.Millisecond, 2*time.Second) })
	chaosErr := make(chan error, 1)
	wg.Go(func() { chaosErr <- s.chaos(runCtx, storeDir) })

	// The samples read the agent's metrics half a second off the
	// responders' queries (every 2 s from the start) and the verifier's
	// lookups (a quarter second apart, an eighth off): a sample of whole
	// seconds then lands on neither.
	select {
	case <-runCtx.Done():
	case <-time.After(500 * time.Millisecond):
	}
	tick := time.NewTicker(cfg.Sample)
	defer tick.Stop()
	var runErr error
loop:
	for {
		select {
		case <-runCtx.Done():
			break loop
		case <-tick.C:
		}
		s.sample(runCtx)
		if err := ag.exited(); err != nil {
			runErr = err
			stop()
			break
		}
	}
	stop()
	wg.Wait()
	if err := <-chaosErr; err != nil && runErr == nil {
		runErr = err
	}
	// What was acknowledged last is still looked for: the verifier runs on
	// until each request is found or given up.
	if runErr == nil && ag.current() != nil {
		drain, cancel := context.WithTimeout(ctx, v.giveUp+v.settle+30*time.Second)
		for drain.Err() == nil && v.waiting() > 0 {
			v.once(drain, 0, 0)
			select {
			case <-drain.Done():
			case <-time.After(time.Second):
			}
		}
		cancel()
	}
	res := s.result()
	return res, runErr
}

// writePodMap says which pod each container is, as the kubelet would.
func writePodMap(path string, pods []pod) error {
	var b strings.Builder
	b.WriteString("[")
	for i, p := range pods {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `{"containerID":%q,"podUID":%q,"namespace":%q,"pod":%q,"container":%q}`,
			p.ctr.ID, p.ctr.PodUID, p.namespace, p.name, p.ctrName)
	}
	b.WriteString("]")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		return fmt.Errorf("writing the pod map: %w", err)
	}
	return nil
}
