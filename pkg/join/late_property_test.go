package join

import (
	"math/rand"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/execid/correlator/pkg/auditlog"
	"github.com/execid/correlator/pkg/capture"
	"github.com/execid/correlator/pkg/vocab"
)

// lateTTL is the pending TTL of the late-delivery property: records come
// either well within it or well after it (up to lateMax), never in the
// last seconds of it, where "late" would depend on the Expire tick.
const (
	lateTTL = 2 * time.Minute
	lateMax = 40 * time.Minute
)

func lateConfig(c *Config) { c.PendingTTL = lateTTL }

// timed is one step of a node's timeline.
type timed struct {
	at  time.Time
	seq int // ties keep generation order, which is itself shuffled
	do  func(j *Joiner, m *auditlog.Merger) []Update
}

// lateTimeline lays sc out in time as a node would see it: each process
// and exit at its own time, each audit event at its request's time plus a
// delay drawn per audit ID, none or late (3 to 40 minutes, past the TTL),
// and up to 20 s more drawn per stage, so a request's stages come in any
// order. Requests under one ID (a conflict, a replay) share the delay and
// are counted from the first one's requestReceived: a process answered by
// its record leaves AnsweredLinger after its exit, so a second request
// under its ID later than that flags only what is held (the session, and
// TestJoinAnsweredLeaveAtTTL). It returns the timeline and how many
// requests came late.
func lateTimeline(rng *rand.Rand, sc *scenario, lateShare float64) ([]timed, int) {
	var tl []timed
	add := func(at time.Time, do func(j *Joiner, m *auditlog.Merger) []Update) {
		tl = append(tl, timed{at: at, seq: rng.Int(), do: do})
	}
	for _, p := range sc.procs {
		add(p.Start.Add(time.Duration(rng.Intn(500))*time.Millisecond), func(j *Joiner, _ *auditlog.Merger) []Update { return j.AddProcess(j.now, p) })
	}
	for _, e := range sc.exits {
		add(e.Time.Add(time.Duration(rng.Intn(500))*time.Millisecond), func(j *Joiner, _ *auditlog.Merger) []Update { return j.AddExit(j.now, e) })
	}
	late := 0
	delays := map[string]time.Duration{} // audit ID -> its delivery delay
	first := map[string]time.Time{}      // audit ID -> its first request's requestReceived
	for _, ev := range sc.events {
		if f, ok := first[string(ev.AuditID)]; !ok || ev.RequestReceivedTimestamp.Before(f) {
			first[string(ev.AuditID)] = ev.RequestReceivedTimestamp.Time
		}
	}
	for _, ev := range sc.events {
		base, ok := delays[string(ev.AuditID)]
		if !ok {
			if rng.Float64() < lateShare {
				base = 3*time.Minute + time.Duration(rng.Int63n(int64(lateMax-3*time.Minute)))
				late++
			}
			delays[string(ev.AuditID)] = base
		}
		// A request's stages travel together, in any order among them.
		d := base + time.Duration(rng.Intn(20_000))*time.Millisecond
		add(first[string(ev.AuditID)].Add(d), func(j *Joiner, m *auditlog.Merger) []Update {
			var out []Update
			for _, r := range m.Add(ev).Updated {
				out = append(out, j.AddRecord(j.now, r)...)
			}
			return out
		})
	}
	sort.Slice(tl, func(a, b int) bool {
		if !tl[a].at.Equal(tl[b].at) {
			return tl[a].at.Before(tl[b].at)
		}
		return tl[a].seq < tl[b].seq
	})
	return tl, late
}

// runTimeline plays tl into a joiner, with the agent's expiry tick between
// steps, and returns every row's last state (what the store holds). With
// restartAt set, the node restarts then: a new joiner takes back the
// unattributed rows the store holds (RestoreProcesses) and plays the rest.
func runTimeline(t *testing.T, tl []timed, restartAt time.Time, rows *snapshot, flagged map[string]bool) {
	snap := &watch{snap: rows, flagged: flagged}
	j := newJoiner(t, lateConfig)
	m := auditlog.NewMerger(auditlog.MergerConfig{})
	clock := t0.Add(-time.Minute)
	tick := func(until time.Time) {
		for ; !clock.After(until); clock = clock.Add(5 * time.Second) {
			snap.apply(j.Expire(clock))
		}
	}
	restarted := restartAt.IsZero()
	for _, s := range tl {
		if !restarted && !s.at.Before(restartAt) {
			tick(restartAt)
			restarted = true
			j = newJoiner(t, lateConfig)
			var stored []Process
			for _, p := range rows.procs {
				if !p.Attribution.Counted() {
					stored = append(stored, p)
				}
			}
			slices.SortFunc(stored, func(a, b Process) int { return b.Start.Compare(a.Start) }) // newest first, as a list reads
			snap.apply(j.RestoreProcesses(restartAt, stored))
		}
		tick(s.at)
		j.advance(s.at)
		snap.apply(s.do(j, m))
	}
	tick(clock.Add(lateMax + lateTTL))
}

// withOrigins gives the generated exec roots the origin capture reports
// for a runtime exec (other_cgroup), as the restart needs to know them.
func withOrigins(sc *scenario) {
	for i := range sc.procs {
		p := &sc.procs[i]
		if strings.HasSuffix(p.ProcessID, "-r") && p.ExecOrigin == "" {
			p.ExecOrigin = capture.OriginOtherCgroup
		}
	}
}

// TestJoinLateRecordsProperty: whatever the audit pipeline's delay, the
// answer is the one the records would have given in time. Each scenario's
// requests are delivered at random delays, before and after the pending
// TTL, their stages in any order, with the agent's expiry running
// throughout, and the final rows are compared with those of the same
// events delivered at once (feed): equal, but for the late mark. A third
// run restarts the node after the TTL and before any late record, the
// store's unattributed rows taken back. Positive controls: processes were
// flagged no_audit_record before their late record, and were flagged late
// after it.
func TestJoinLateRecordsProperty(t *testing.T) {
	seed, rng := propertyRand(t)
	scenarios := 200
	if testing.Short() {
		scenarios = 40
	}
	seen := map[string]int{}
	for s := range scenarios {
		sc := genScenario(rng)
		withOrigins(&sc)
		want := feed(t, sc, rng, 0).canonical()
		for _, share := range []float64{0.5, 1} {
			tl, late := lateTimeline(rng, &sc, share)
			snap := newSnapshot()
			flagged := map[string]bool{}
			runTimeline(t, tl, time.Time{}, snap, flagged)
			if got := snap.canonical(); got != want {
				t.Fatalf("seed %d scenario %d (%d requests late of share %.1f): final state differs from in time\n%s",
					seed, s, late, share, diffLines(want, got))
			}
			countLate(snap, flagged, seen, "")
			if share < 1 || late == 0 {
				continue
			}
			// Every request late (3 minutes at least): restart past the
			// TTL, before the first of them.
			restart := newSnapshot()
			runTimeline(t, tl, t0.Add(lateTTL+time.Minute), restart, nil)
			if got := restart.canonical(); got != want {
				t.Fatalf("seed %d scenario %d (restart before %d late requests): final state differs from in time\n%s",
					seed, s, late, diffLines(want, got))
			}
			countLate(restart, nil, seen, "restart ")
		}
	}
	t.Logf("seed %d: %v", seed, seen)
	for _, k := range []string{"late", "late after no_audit_record", "late heuristic", "restart late"} {
		if seen[k] == 0 {
			t.Errorf("seed %d: no process %s: the property proves little", seed, k)
		}
	}
}

// watch is a snapshot that also notes which processes were ever handed
// out flagged no_audit_record.
type watch struct {
	snap    *snapshot
	flagged map[string]bool
}

func (w *watch) apply(us []Update) {
	for _, u := range us {
		if w.flagged != nil && u.Process != nil && slices.Contains(u.Process.Flags, vocab.FlagNoAuditRecord) {
			w.flagged[u.Process.ProcessID] = true
		}
	}
	w.snap.apply(us)
}

// countLate tallies the late marks of a final state, checking each: a
// late process says by how much, and that is past the TTL.
func countLate(snap *snapshot, flagged map[string]bool, seen map[string]int, prefix string) {
	for id, p := range snap.procs {
		if !slices.Contains(p.Flags, vocab.FlagLateAuditRecord) {
			continue
		}
		seen[prefix+"late"]++
		if p.RecordDelay <= 0 {
			seen[prefix+"late without a delay"]++
		}
		if flagged[id] {
			seen[prefix+"late after no_audit_record"]++
		}
		if p.Attribution == vocab.AttributionHeuristic {
			seen[prefix+"late heuristic"]++
		}
	}
}
