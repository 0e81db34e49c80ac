package elasticsearch

import (
	"context"
	"os"
	"slices"
	"testing"
	"time"

	itest "github.com/execid/correlator/internal/testutil"
	"github.com/execid/correlator/pkg/store"
)

// TestNodeKilledDuringBulkLoad kills the node that holds the primary of
// the index ten agents are writing, keeps them writing on two nodes,
// starts it again and waits for green: every row a writer had acknowledged
// is stored, with its exit when the row held one, no row was dropped, and
// the writers' backlogs drain.
func TestNodeKilledDuringBulkLoad(t *testing.T) {
	cl := killableCluster(t)
	cfg := clusterConfig(t)
	cfg.Refresh, cfg.RetryInitial, cfg.SessionProcessLimit = "false", 0, 0 // the agent's
	probe := openCluster(t, cfg)
	index := probe.n.index(kindProcesses, time.Now())
	if err := probe.c.put(context.Background(), "/"+index, map[string]any{}, "resource_already_exists_exception"); err != nil {
		t.Fatalf("creating %s: %v", index, err)
	}
	victim := primaryNodeOf(t, probe, index)
	// Every store knows all three nodes, one that stays first.
	urls := cl.URLs()
	first := (victim + 1) % len(urls)
	cfg.URLs = slices.Concat(urls[first:], urls[:first])
	probe = openCluster(t, cfg)

	const agents, rate = 10, 100
	f := startOutageFleet(t, cfg, agents, rate)
	for range 3 { // a few seconds of load, bulks in flight at the kill
		f.waitCommitted(t, "every writer committing before the kill", f.commits(), time.Minute)
	}
	before := fleetCountProcesses(t, probe)
	if before == 0 {
		t.Fatal("no process stored before the kill")
	}
	snap := f.commits()
	leaveClusterWhole(t, cl, victim)
	if err := cl.KillNode(victim); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	f.waitCommitted(t, "every writer committing after the kill", snap, 2*time.Minute)
	failover := time.Since(killed)
	for range 5 { // and more on two nodes
		f.waitCommitted(t, "every writer committing on two nodes", f.commits(), time.Minute)
	}
	if p := primaryNodeOf(t, probe, index); p == victim {
		t.Fatalf("the primary of %s is still on n%d, which was killed", index, p)
	}
	during := fleetCountProcesses(t, probe)
	if during <= before {
		t.Fatalf("count %d after the kill, %d before: no growth", during, before)
	}
	back, err := restartNodes(cl, victim)
	if err != nil {
		t.Fatal(err)
	}
	f.waitCommitted(t, "every writer committing once green", f.commits(), time.Minute)
	f.drain(t)
	l := f.check(t, probe)
	if l.dropped != 0 || l.missing != 0 || l.lostExits != 0 {
		t.Errorf("with one node of three down, %d rows dropped, %d processes and %d exits missing",
			l.dropped, l.missing, l.lostExits)
	}
	var failures int64
	for _, a := range f.agents {
		failures += a.w.Stats().Failures
	}
	t.Logf("node n%d (the primary's) killed with %d stored; every writer committed again %s later; "+
		"the replica promoted; %d stored before it was back; back and green in %s; %d processes added, "+
		"%d acknowledged, %d stored; %d failed commits, %d rows dropped; "+
		"%d requests, %d unanswered, %d answered 429 whole", victim, before, failover.Round(time.Millisecond), during,
		back.Round(time.Second), l.added, l.committed, l.stored, failures, l.dropped, f.counts.requests.Load(),
		f.counts.unanswered.Load(), f.counts.tooMany.Load())
}

// TestClusterDownForAMinute kills all three nodes for OUTAGE_SECONDS
// (default 20; the minute with OUTAGE_SECONDS=60) while ten agents
// keep adding rows, then starts them again: every row added is stored or
// counted as dropped by its writer, and once the cluster is back the
// backlogs drain and nothing more is dropped.
//
// The stores give up a bulk after 2 s (RetryMaxElapsed) and the writers
// hold 300 rows each: the writer's own retry and its bound are what this
// exercises. OUTAGE_AGENT_DEFAULTS=1 runs the agent's defaults instead (a
// minute, 20,000 rows), under which one Write rides out most of a
// minute's outage, blocking Add meanwhile.
func TestClusterDownForAMinute(t *testing.T) {
	cl := killableCluster(t)
	outage := time.Duration(fleetEnv(t, "OUTAGE_SECONDS", 20)) * time.Second
	cfg := clusterConfig(t)
	cfg.Refresh, cfg.RetryInitial, cfg.SessionProcessLimit = "false", 0, 0
	const agents, rate = 10, 50
	held, defaults := 300, os.Getenv("OUTAGE_AGENT_DEFAULTS") == "1"
	if defaults {
		held = store.DefaultMaxHeld
	} else {
		cfg.RetryMaxElapsed = 2 * time.Second
	}
	probe := openCluster(t, cfg)
	f := startOutageFleet(t, cfg, agents, rate, store.WithMaxHeld(held))
	for range 3 {
		f.waitCommitted(t, "every writer committing before the outage", f.commits(), time.Minute)
	}
	before := fleetCountProcesses(t, probe)
	if before == 0 {
		t.Fatal("no process stored before the outage")
	}

	all := []int{0, 1, 2}
	leaveClusterWhole(t, cl, all...)
	for _, i := range all {
		if err := cl.KillNode(i); err != nil {
			t.Fatal(err)
		}
	}
	down := time.Now()
	// Every writer sees the outage (not with the agent's defaults, whose
	// one Write retries for a minute before it fails).
	var noticed time.Duration
	if !defaults {
		itest.EventuallyWithin(t, outage, "every writer failing", func() bool {
			for _, a := range f.agents {
				if a.w.Healthy() == nil {
					return false
				}
			}
			return true
		})
		noticed = time.Since(down)
	}
	// The outage's length is the scenario's parameter, not a wait for
	// anything: the writers go on adding for the rest of it, and what is
	// checked after is the accounting, whatever the clock did.
	<-time.After(time.Until(down.Add(outage)))
	hctx, hcancel := context.WithTimeout(context.Background(), time.Second)
	_, err := cl.Health(hctx)
	hcancel()
	if err == nil {
		t.Fatalf("the outage ended early: a node answers (another test process started it?)")
	}
	droppedDown := f.dropped()
	back, err := restartNodes(cl, all...)
	if err != nil {
		t.Fatal(err)
	}
	snap := f.commits()
	itest.EventuallyWithin(t, 2*time.Minute, "every writer committing and healthy again", func() bool {
		for i, a := range f.agents {
			if a.w.Healthy() != nil || a.commits.Load() <= snap[i] {
				return false
			}
		}
		return true
	})
	recovered := time.Since(down)
	droppedUp := f.dropped()
	f.waitCommitted(t, "every writer committing after its recovery", f.commits(), time.Minute)
	f.drain(t)
	if d := f.dropped(); d != droppedUp {
		t.Errorf("%d rows dropped after every writer had recovered", d-droppedUp)
	}
	if perWriter := int(outage.Seconds()) * rate; perWriter >= 2*held && droppedUp == 0 {
		t.Errorf("no row dropped: about %d rows a writer over %s, %d held at most", perWriter, outage, held)
	}
	l := f.check(t, probe)
	var failures int64
	var maxBlock time.Duration
	for i, a := range f.agents {
		failures += a.w.Stats().Failures
		maxBlock = max(maxBlock, f.drivers[i].maxBlock)
	}
	seen := "every writer failing after " + noticed.Round(time.Millisecond).String()
	if noticed == 0 {
		seen = "not every writer failing while down"
	}
	t.Logf("%d agents x %d execs/s, all nodes down for %s (%s): %d stored before; "+
		"nodes back and green in %s, every writer healthy %s after the kill; %d processes added, %d acknowledged, "+
		"%d stored; %d missing and %d exits missing (%d rows), within the %d rows dropped (%d while down, %d until recovered); "+
		"%d failed commits; longest Add %s; %d requests unanswered", agents, rate, outage, seen, before,
		back.Round(time.Second), recovered.Round(time.Second), l.added, l.committed, l.stored, l.missing, l.lostExits,
		l.lostRows, l.dropped, droppedDown, droppedUp, failures, maxBlock.Round(time.Millisecond), f.counts.unanswered.Load())
}
