package soak

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// sampler takes the readings and does to the agent what a node's month
// does: upgrades, a crash, a full disk, bursts.
type sampler struct {
	cfg   Config
	ag    *agents
	db    string
	q     *queries
	v     *verifier
	l     *load
	start time.Time

	mu      sync.Mutex
	samples []Sample
	events  []Event
	phase   string
	last    struct { // the previous reading of the same agent
		gen   int
		at    time.Time
		r     reading
		valid bool
	}
	base, prev    reading // cumulative counters: what earlier agents counted, and the last reading
	rate          float64
	rateOK        bool
	sawUnwritable bool
	api           apiHists // the agents' own query times by route, every agent's added
	node          nodeCPU  // the node's CPU times at the previous sample
	nodeOK        bool
	nodeFailed    bool // a reading failed; the first failure is logged
}

func (s *sampler) event(what string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	s.events = append(s.events, Event{At: now, Elapsed: now.Sub(s.start), What: what})
	s.cfg.Log("soak %s: %s", now.Sub(s.start).Round(time.Second), what)
}

func (s *sampler) setPhase(p string) {
	s.mu.Lock()
	s.phase = p
	s.mu.Unlock()
}

// execRate is the node's exec rate over the last interval, for the pacer.
func (s *sampler) execRate() (float64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rate, s.rateOK
}

// sample takes one reading.
func (s *sampler) sample(ctx context.Context) {
	now := time.Now()
	smp := Sample{At: now, Elapsed: now.Sub(s.start), StoreBytes: fileSize(s.db), WALBytes: fileSize(s.db + "-wal")}
	node, nodeErr := readNodeCPU()
	lat := s.q.interval()
	smp.Queries, smp.QueryP99MS = len(lat), p99(lat)
	smp.QueryFails = int(s.q.fails.Load())
	smp.Acked, smp.Verified, smp.Lost = s.l.acked.Load(), s.v.verified.Load(), s.v.lost.Load()
	p := s.ag.current()
	var r reading
	var err error
	if p != nil {
		if r, err = readProc(p.cmd.Process.Pid); err == nil {
			err = scrape(ctx, s.ag.base, &r)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	smp.Phase = s.phase
	if nodeErr != nil {
		if !s.nodeFailed {
			s.cfg.Log("soak: %v (the samples' node figures are 0 from here to the next reading)", nodeErr)
		}
		s.nodeFailed, s.nodeOK = true, false
	} else {
		if s.nodeOK {
			smp.NodeBusy, smp.NodeSteal, _ = nodeShares(s.node, node)
		}
		s.node, s.nodeOK = node, true
	}
	if p == nil || err != nil {
		s.rateOK = false
		smp.RingDrops, smp.Evictions, smp.StoreDropped = s.cum(s.prev)
		s.samples = append(s.samples, smp)
		return
	}
	if s.last.valid && s.last.gen != p.gen {
		// A new agent: counters the kernel keeps (pinned) carry on, the
		// agent's own start again from zero.
		s.carry(r)
	}
	if s.last.valid && s.last.gen == p.gen {
		s.api.add(r.api, s.last.r.api)
	} else {
		s.api.add(r.api, nil)
	}
	smp.Agent = p.gen
	smp.RSSBytes, smp.AnonBytes, smp.HeapBytes = r.rss, r.anon, int64(r.heap)
	smp.HeapKeptBytes, smp.NextGCBytes = int64(r.heapKept), int64(r.nextGC)
	smp.Goroutines, smp.OpenFiles = int(r.goroutines), r.fds
	if s.last.valid && s.last.gen == p.gen {
		dt := now.Sub(s.last.at).Seconds()
		dx := r.execs - s.last.r.execs
		if dt > 0 && dx >= 0 {
			smp.ExecRate = dx / dt
			s.rate, s.rateOK = smp.ExecRate, true
		}
		if dx > 0 {
			smp.CPUPerExecUS = float64(r.cpuTicks-s.last.r.cpuTicks) / clockTicks * 1e6 / dx
		}
	}
	if r.storeWritable == 0 {
		s.sawUnwritable = true
	}
	s.prev = r
	smp.RingDrops, smp.Evictions, smp.StoreDropped = s.cum(r)
	s.last.gen, s.last.at, s.last.r, s.last.valid = p.gen, now, r, true
	s.samples = append(s.samples, smp)
}

// carry adds the previous agent's counts to the base where the new
// agent's counter restarted below them.
func (s *sampler) carry(r reading) {
	if r.ringDrops < s.prev.ringDrops {
		s.base.ringDrops += s.prev.ringDrops
	}
	if r.evictions < s.prev.evictions {
		s.base.evictions += s.prev.evictions
	}
	if r.storeDropped < s.prev.storeDropped {
		s.base.storeDropped += s.prev.storeDropped
	}
}

func (s *sampler) cum(r reading) (int64, int64, int64) {
	return int64(s.base.ringDrops + r.ringDrops), int64(s.base.evictions + r.evictions), int64(s.base.storeDropped + r.storeDropped)
}

// chaos runs the mid-run events at fixed shares of the duration: bursts,
// a rolling upgrade (SIGTERM, a new agent on the same pins and store), a
// kill -9, and the store's disk filled to its limit for a while.
func (s *sampler) chaos(ctx context.Context, storeDir string) error {
	d := s.cfg.Duration
	burst := min(20*time.Second, d/20)
	full := min(time.Minute, d/10)
	first := [4]time.Duration{10, 20, 30, 50} // percent: a burst, the upgrade, the kill -9, the full disk
	later := [2]time.Duration{65, 90}         // percent: the later bursts
	if s.cfg.LongRun {
		// The restarts come first, then the full disk and the last
		// agent's first burst, both within its warm-up, the burst once
		// its late window is full (its 15th minute): a burst on top of
		// the held processes raises the Go runtime's kept pages to their
		// ceiling (about its goal and a quarter), a step once if not a
		// leak; the later bursts, in the slopes' window, show whether it
		// repeats. (The seventh hour's first burst came at the 6th
		// minute, with the window half full; its step came at the burst
		// at 39. In the thirteenth the step repeated at both later ones.)
		first = [4]time.Duration{35, 5, 10, 20}
		// The later bursts end their aftermath (their ID-less sessions'
		// processes held for the late window, their rows deleted a
		// retention later: ten minutes of an hour) before the last tenth,
		// whose readings are the run's "end": a burst at 90 % (the twelfth
		// hour's, 4.6 MiB held at its end) set a burst's aftermath against
		// a start without one.
		later = [2]time.Duration{55, 75}
	}
	steps := []chaosStep{
		// The restarts come early, so the last agent lives most of the
		// run: its slopes are measured past its warm-up over 70 % of a
		// short run, and over half of a long one, whose warm-up is longer
		// (warmUp).
		{d * first[0] / 100, func() error { return s.burst(ctx, burst) }},
		{d * first[1] / 100, func() error { return s.restart(syscall.SIGTERM, "upgrade") }},
		{d * first[2] / 100, func() error { return s.restart(syscall.SIGKILL, "kill -9") }},
		{d * first[3] / 100, func() error { return s.fillDisk(ctx, storeDir, full) }},
		{d * later[0] / 100, func() error { return s.burst(ctx, burst) }},
		{d * later[1] / 100, func() error { return s.burst(ctx, burst) }},
	}
	slices.SortStableFunc(steps, func(a, b chaosStep) int { return cmp.Compare(a.at, b.at) })
	for _, st := range steps {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Until(s.start.Add(st.at))):
		}
		if err := st.do(); err != nil {
			return err
		}
	}
	return nil
}

// chaosStep is one mid-run event and when it comes.
type chaosStep struct {
	at time.Duration
	do func() error
}

func (s *sampler) burst(ctx context.Context, d time.Duration) error {
	s.event("burst")
	s.l.burst.Store(true)
	defer s.l.burst.Store(false)
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
	return nil
}

// restart stops the agent with sig and starts the next, as a DaemonSet's
// rolling update (SIGTERM) or an OOM kill and restart (SIGKILL) does.
func (s *sampler) restart(sig syscall.Signal, what string) error {
	s.event(what)
	s.setPhase("restarting")
	defer s.setPhase("")
	if err := s.ag.stop(sig, time.Minute); err != nil {
		return err
	}
	_, err := s.ag.start(2 * time.Minute)
	return err
}

// fillDisk fills the store's disk to its last byte, holds it full for d,
// then frees it.
func (s *sampler) fillDisk(ctx context.Context, dir string, d time.Duration) error {
	path := filepath.Join(dir, "filler")
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("creating the filler: %w", err)
	}
	chunk := make([]byte, 1<<20)
	for {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				f.Close()
				return fmt.Errorf("filling the store's disk: %w", err)
			}
			break
		}
	}
	// The last pages: byte by byte is too slow, halve the chunk instead.
	for n := len(chunk) / 2; n > 0; n /= 2 {
		for {
			if _, err := f.Write(chunk[:n]); err != nil {
				break
			}
		}
	}
	f.Close()
	s.event("disk full")
	s.setPhase("disk-full")
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("freeing the store's disk: %w", err)
	}
	s.setPhase("")
	s.event("disk freed")
	return nil
}

// result gathers what the run recorded.
func (s *sampler) result() *Result {
	s.mu.Lock()
	defer s.mu.Unlock()
	res := &Result{Samples: s.samples, Events: s.events, Sessions: s.l.sessions.Load(), IDless: s.l.idless.Load(),
		ExecErrors: s.l.execErrs.Load(), PostRetries: s.l.postRetries.Load(),
		Unattributed: s.v.unattributed.Load(), SawUnwritable: s.sawUnwritable, Agents: s.ag.gen}
	res.QueryP99, res.QueryByKind = s.q.byKind()
	res.AgentQueryP99 = s.api.all().quantile(0.99)
	res.AgentRouteP99 = map[string]float64{}
	for route, h := range s.api {
		res.AgentRouteP99[route] = h.quantile(0.99)
	}
	s.q.mu.Lock()
	res.Queries = slices.Clone(s.q.log)
	s.q.mu.Unlock()
	if e, ok := s.l.firstExecErr.Load().(string); ok {
		res.ExecErr = e
	}
	if e, ok := s.q.lastErr.Load().(string); ok {
		res.QueryErr = e
	}
	s.v.mu.Lock()
	res.LostIDs = s.v.lostIDs
	s.v.mu.Unlock()
	if len(s.samples) > 0 {
		last := s.samples[len(s.samples)-1]
		last.Acked, last.Verified, last.Lost = s.l.acked.Load(), s.v.verified.Load(), s.v.lost.Load()
		s.samples[len(s.samples)-1] = last
	}
	for g := 1; g <= s.ag.gen; g++ {
		b, err := os.ReadFile(filepath.Join(s.cfg.Dir, fmt.Sprintf("agent-%d.log", g)))
		if err == nil {
			ps, n := parsePasses(b)
			res.Passes = append(res.Passes, ps...)
			res.RetentionPasses += n
		}
	}
	return res
}

// mountTmpfs mounts a size-bounded tmpfs at dir for the store, so that
// filling it is the store's disk full and nothing else's.
func mountTmpfs(t testing.TB, dir string, mib int) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("creating the store's directory: %w", err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%dm,mode=0700", mib)); err != nil {
		return fmt.Errorf("mounting a %d MiB tmpfs for the store: %w", mib, err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	return nil
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("finding a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}
