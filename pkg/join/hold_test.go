package join

import (
	"math/rand"
	"reflect"
	"testing"
	"time"

	"github.com/execid/correlator/pkg/auditlog"
	"github.com/execid/correlator/pkg/vocab"
)

// Hold changes how many updates the joiner hands out, never the rows: the
// same events in the same order, the process side in held bursts of random
// length (as the agent reads the ring), end in exactly the rows given
// without Hold. Positive control: the bursts did hold back updates.
func TestHoldSameRowsProperty(t *testing.T) {
	seed, rng := propertyRand(t)
	scenarios := 200
	if testing.Short() {
		scenarios = 30
	}
	var plainUpdates, heldUpdates int
	for s := range scenarios {
		sc := genScenario(rng)
		// A step is a process (< len(procs)), an exit, or an audit event.
		steps := rng.Perm(len(sc.procs) + len(sc.exits) + len(sc.events))
		plain, n := feedHeld(t, sc, steps, nil)
		held, m := feedHeld(t, sc, steps, rng)
		plainUpdates, heldUpdates = plainUpdates+n, heldUpdates+m
		if !reflect.DeepEqual(plain.procs, held.procs) || !reflect.DeepEqual(plain.sessions, held.sessions) {
			t.Fatalf("seed %d scenario %d: held bursts end in other rows\n%s", seed, s,
				diffLines(plain.canonical(), held.canonical()))
		}
	}
	if heldUpdates >= plainUpdates {
		t.Fatalf("seed %d: held bursts handed out %d updates, without Hold %d: nothing was held", seed, heldUpdates, plainUpdates)
	}
	t.Logf("updates handed out: %d without Hold, %d in held bursts", plainUpdates, heldUpdates)
}

// feedHeld runs sc's events in the order steps gives; with rng, runs of
// process-side steps are held bursts of random length, released before an
// audit event and at the end. It returns the rows and the updates given.
func feedHeld(t *testing.T, sc scenario, steps []int, rng *rand.Rand) (*snapshot, int) {
	snap := newSnapshot()
	given := 0
	feedInto(t, sc, steps, rng, func(us []Update) { given += len(us); snap.apply(us) })
	return snap, given
}

// feedInto is feedHeld handing every update to apply.
func feedInto(t *testing.T, sc scenario, steps []int, rng *rand.Rand, apply func([]Update)) {
	j := newJoiner(t)
	m := auditlog.NewMerger(auditlog.MergerConfig{})
	now := t0.Add(90 * time.Second)
	left := 0 // steps left in the open burst
	release := func() {
		if left > 0 || j.held {
			apply(j.Release())
			left = 0
		}
	}
	np, ne := len(sc.procs), len(sc.exits)
	for _, i := range steps {
		if i >= np+ne {
			release()
			for _, r := range m.Add(sc.events[i-np-ne]).Updated {
				apply(j.AddRecord(now, r))
			}
			continue
		}
		if rng != nil && !j.held {
			j.Hold()
			left = 1 + rng.Intn(6)
		}
		if i < np {
			apply(j.AddProcess(now, sc.procs[i]))
		} else {
			apply(j.AddExit(now, sc.exits[i-np]))
		}
		if left--; j.held && left == 0 {
			apply(j.Release())
		}
	}
	release()
	apply(j.Expire(t0.Add(time.Hour)))
}

// A process changed and then evicted inside a held burst still has its
// last state handed out at Release, as it was without Hold (each Add gave
// it out before the next one evicted it). Control: the same adds without
// Hold give the same rows.
func TestHoldKeepsEvicted(t *testing.T) {
	run := func(hold bool) (*snapshot, Stats) {
		j := newJoiner(t, func(c *Config) { c.MaxProcesses = 2 })
		snap := newSnapshot()
		if hold {
			j.Hold()
		}
		for _, id := range []string{"p1", "p2", "p3"} {
			snap.apply(j.AddProcess(t0.Add(2*time.Second), pr(id, "", "", vocab.SourceNone)))
		}
		if hold {
			snap.apply(j.Release())
		}
		return snap, j.Stats()
	}
	plain, pst := run(false)
	held, hst := run(true)
	if pst.EvictedProcesses != 1 || hst.EvictedProcesses != 1 {
		t.Fatalf("evicted %d without Hold and %d held, want 1 each", pst.EvictedProcesses, hst.EvictedProcesses)
	}
	if len(held.procs) != 3 || !reflect.DeepEqual(plain.procs, held.procs) {
		t.Fatalf("held burst gave %d rows, want the 3 given without Hold:\n%s", len(held.procs),
			diffLines(plain.canonical(), held.canonical()))
	}
}
