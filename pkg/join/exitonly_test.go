package join

import (
	"strings"
	"testing"
	"time"
)

// An update marked ExitOnly changes nothing but the exit of the row the
// joiner handed out before it, whatever the order of events and however
// they are held: a store that writes only the exit of such an update ends
// with the rows a store writing them whole has. Positive controls: some
// updates were ExitOnly, and some exits came in a whole row (a process's
// first row, or one whose attribution changed with it).
func TestExitOnlyProperty(t *testing.T) {
	seed, rng := propertyRand(t)
	scenarios := 200
	if testing.Short() {
		scenarios = 30
	}
	var exitOnly, wholeWithExit int
	for s := range scenarios {
		sc := genScenario(rng)
		steps := rng.Perm(len(sc.procs) + len(sc.exits) + len(sc.events))
		for _, held := range []bool{false, true} {
			snap := newSnapshot()
			counted := &countingSnapshot{snapshot: snap}
			hold := rng
			if !held {
				hold = nil
			}
			feedInto(t, sc, steps, hold, counted.apply)
			if len(snap.badExitOnly) > 0 {
				t.Fatalf("seed %d scenario %d (held %v): %s", seed, s, held, strings.Join(snap.badExitOnly, "\n"))
			}
			exitOnly += snap.exitOnly
			wholeWithExit += counted.wholeWithExit
		}
	}
	if exitOnly == 0 || wholeWithExit == 0 {
		t.Fatalf("seed %d: %d ExitOnly updates, %d whole rows with an exit: the property was not exercised", seed, exitOnly, wholeWithExit)
	}
	t.Logf("%d ExitOnly updates, %d whole rows with an exit", exitOnly, wholeWithExit)
}

// A process whose exit comes in a later burst than its exec is handed out
// whole, then ExitOnly; one whose exec and exit share a burst, whole once.
// An exit that comes with a change of attribution is whole.
func TestExitOnlyCases(t *testing.T) {
	now := t0.Add(90 * time.Second)
	t.Run("exit in a later burst", func(t *testing.T) {
		j := newJoiner(t)
		ups := j.AddProcess(now, pr("p1", "", "", ""))
		if len(ups) != 1 || ups[0].ExitOnly {
			t.Fatalf("exec: %+v, want one whole row", ups)
		}
		ups = j.AddExit(now, Exit{ProcessID: "p1", Time: now.Add(time.Second)})
		if len(ups) != 1 || !ups[0].ExitOnly || ups[0].Process.Exit.IsZero() {
			t.Fatalf("exit: %+v, want one ExitOnly row with its exit", ups)
		}
	})
	t.Run("control: exec and exit in one burst", func(t *testing.T) {
		j := newJoiner(t)
		j.Hold()
		j.AddProcess(now, pr("p1", "", "", ""))
		j.AddExit(now, Exit{ProcessID: "p1", Time: now.Add(time.Second)})
		ups := j.Release()
		if len(ups) != 1 || ups[0].ExitOnly || ups[0].Process.Exit.IsZero() {
			t.Fatalf("%+v, want one whole row with its exit", ups)
		}
	})
	t.Run("control: a re-exec and the exit in one burst", func(t *testing.T) {
		j := newJoiner(t)
		j.AddProcess(now, pr("p1", "", "", ""))
		j.Hold()
		again := pr("p1", "", "", "")
		again.Argv = []string{"/bin/other"}
		j.AddProcess(now, again)
		j.AddExit(now, Exit{ProcessID: "p1", Time: now.Add(time.Second)})
		ups := j.Release()
		if len(ups) != 1 || ups[0].ExitOnly {
			t.Fatalf("%+v, want one whole row", ups)
		}
	})
}

// countingSnapshot counts the whole rows that carry an exit.
type countingSnapshot struct {
	*snapshot
	wholeWithExit int
}

func (c *countingSnapshot) apply(us []Update) {
	for _, u := range us {
		if u.Process != nil && !u.ExitOnly && !u.Process.Exit.IsZero() {
			c.wholeWithExit++
		}
	}
	c.snapshot.apply(us)
}
