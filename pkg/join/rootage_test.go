package join

import (
	"fmt"
	"testing"
	"time"

	"github.com/execid/correlator/pkg/auditlog"
	"github.com/execid/correlator/pkg/vocab"
)

// Alice's ended session: once its record and processes are gone and the
// roots' reach has passed, her root is forgotten; a redelivery of her
// record and a root that mallory starts under her ID later still do not
// name alice (the root starts after the request ended, so it cannot be
// hers). The control: the same root while her request is open would fit
// it, and then her remembered root is what keeps it from mallory
// (TestJoinRootHoldOutlivesTheRoot, which ages the roots too).
func TestJoinRootsAgeOut(t *testing.T) {
	for _, aged := range []bool{false, true} {
		t.Run(fmt.Sprintf("aged=%v", aged), func(t *testing.T) {
			j := newJoiner(t, noLateWindow)
			snap := newSnapshot()
			rec := xr(idA) // requestReceived t0, ended t0+1m
			snap.apply(j.AddRecord(t0, rec))
			snap.apply(j.AddProcess(t0, pr("ra", "runc", idA, vocab.SourceEnv)))
			snap.apply(j.AddExit(t0, Exit{ProcessID: "ra", Time: t0.Add(2 * time.Second)}))
			checkWant(t, "ra", snap.procs["ra"], want{attr: vocab.AttributionAuditID, auditID: idA})
			at := t0.Add(DefaultPendingTTL + 20*time.Second) // the record idle past the TTL, the roots within reach
			snap.apply(j.Expire(at))
			if j.recs[idA] != nil || j.procs.len() != 0 {
				t.Fatal("alice's record or processes still held: the test proves nothing")
			}
			if aged {
				at = at.Add(j.rootReach())
				snap.apply(j.Expire(at))
				if j.rootCount != 0 || len(j.roots) != 0 || len(j.rootsEnded) != 0 {
					t.Fatalf("roots %d (%d IDs, %d ended) past the reach: want none", j.rootCount, len(j.roots), len(j.rootsEnded))
				}
			} else if j.rootCount != 1 {
				t.Fatalf("roots %d within the reach: want alice's", j.rootCount)
			}
			snap.apply(j.AddRecord(at, rec)) // a redelivery
			rm := with(pr("rm", "runc-m", idA, vocab.SourceEnv), func(p *Process) { p.Start, p.ExecTime = at, at })
			snap.apply(j.AddProcess(at, rm))
			got := snap.procs["rm"]
			if got.AuditID == idA || got.Attribution == vocab.AttributionAuditID {
				t.Errorf("mallory's later root under alice's ID: attributed %s to %q", got.Attribution, got.AuditID)
			}
			if got.ClaimedAuditID != idA {
				t.Errorf("mallory's root: claimed %q, want alice's ID kept as evidence", got.ClaimedAuditID)
			}
		})
	}
}

// Roots whose record never came, or came open, are not aged: a later
// root would fit an open request. Only MaxRecords bounds them.
func TestJoinRootsKeptWithoutAnEnd(t *testing.T) {
	open := rwith(xr(idB), func(r *auditlog.ExecRecord) { r.EndTimestamp = time.Time{} })
	j := newJoiner(t, noLateWindow)
	j.AddRecord(t0, open)
	j.AddProcess(t0, pr("rb", "runc", idB, vocab.SourceEnv))
	j.AddExit(t0, Exit{ProcessID: "rb", Time: t0.Add(time.Second)})
	j.AddProcess(t0, pr("rc", "runc-c", idC, vocab.SourceEnv)) // its record never comes
	j.AddExit(t0, Exit{ProcessID: "rc", Time: t0.Add(time.Second)})
	for at := t0; at.Before(t0.Add(3 * time.Hour)); at = at.Add(time.Minute) {
		j.Expire(at)
	}
	if j.recs[idB] != nil {
		t.Fatal("bob's record still held: the test proves nothing")
	}
	if len(j.roots[idB]) != 1 || len(j.roots[idC]) != 1 {
		t.Errorf("roots after 3 hours: %v: want the open request's and the recordless ID's kept", j.roots)
	}
}

// make soak's node in the joiner alone, for an hour at 4 sessions a second
// with a 10-minute late window: what it holds must stop growing once the
// window is full. Before roots aged (ageRoots) they grew by 216 a minute,
// 600 bytes each, for the six hours MaxRecords allowed.
func TestJoinHoldsFlatOverAnHour(t *testing.T) {
	if testing.Short() {
		t.Skip("an hour of sessions")
	}
	j := newJoiner(t, func(c *Config) { c.LateWindow = 10 * time.Minute })
	sizes := func() map[string]int {
		return map[string]int{"processes": j.procs.len(), "pending": len(j.pending), "records": len(j.recs),
			"roots": j.rootCount, "root IDs": len(j.roots), "root queue": j.rootq.size(), "pairings": len(j.pairs),
			"ended": len(j.rootsEnded), "carried IDs": len(j.ids), "deps": len(j.deps), "record slots": len(j.recsPod),
			"root slots": len(j.rootsSlot), "process queue": j.procq.size(), "exit queue": j.exitq.size(),
			"record queue": j.recq.size(), "done queue": j.doneq.size(), "late": j.lateq.Len()}
	}
	var at20 map[string]int
	busyPodFor(j, 60*time.Minute, func(at time.Duration) {
		if at == 20*time.Minute {
			at20 = sizes()
		}
	})
	if at20 == nil || at20["roots"] == 0 {
		t.Fatalf("nothing held at 20 minutes: %v", at20)
	}
	for k, v := range sizes() {
		if v > at20[k]+at20[k]/5+1024 {
			t.Errorf("%s: %d at 60 minutes, %d at 20: still growing", k, v, at20[k])
		}
	}
	if got := j.Stats().EvictedRoots; got != 0 {
		t.Errorf("roots evicted by the count bound: %d, want none (aged instead)", got)
	}
}
