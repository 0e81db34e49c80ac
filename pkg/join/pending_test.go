package join

import (
	"testing"
	"time"

	"github.com/execid/correlator/pkg/capture"
	"github.com/execid/correlator/pkg/vocab"
)

// checkPending fails unless the row says it waits until want (zero: that
// it does not wait).
func checkPending(t *testing.T, what string, p Process, want time.Time) {
	t.Helper()
	if p.Pending != !want.IsZero() || !p.PendingUntil.Equal(want) {
		t.Errorf("%s: pending %v until %v, want until %v", what, p.Pending, p.PendingUntil, want)
	}
}

// TestPendingUntilCarriedID: a process carrying an ID waits for its
// record until the pending TTL after it was taken in; the record, or the
// TTL, ends the wait, and the row says so.
func TestPendingUntilCarriedID(t *testing.T) {
	in := t0.Add(2 * time.Second) // taken in a second after its start
	ttlEnd := in.Add(DefaultPendingTTL)
	for _, tc := range []struct {
		name string
		end  func(j *Joiner) []Update
		want want
	}{
		{"record", func(j *Joiner) []Update { return j.AddRecord(in.Add(10*time.Second), xr(idA)) },
			want{attr: vocab.AttributionAuditID, auditID: idA}},
		{"ttl", func(j *Joiner) []Update { return j.Expire(ttlEnd) },
			want{claimed: idA, flags: []string{vocab.FlagNoAuditRecord}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := newJoiner(t)
			snap := newSnapshot()
			snap.apply(j.AddProcess(in, pr("r", "runc", idA, vocab.SourceEnv)))
			checkPending(t, "taken in", snap.procs["r"], ttlEnd)
			// Time passing changes nothing until the wait ends.
			snap.apply(j.Expire(ttlEnd.Add(-time.Second)))
			checkPending(t, "before the TTL", snap.procs["r"], ttlEnd)
			if got, _ := j.Process("r"); !got.PendingUntil.Equal(ttlEnd) {
				t.Errorf("Process: pending until %v, want %v", got.PendingUntil, ttlEnd)
			}
			snap.apply(tc.end(j))
			checkPending(t, "after", snap.procs["r"], time.Time{})
			checkWant(t, "r", snap.procs["r"], tc.want)
			if len(snap.badExitOnly) > 0 {
				t.Errorf("exit-only updates: %v", snap.badExitOnly)
			}
		})
	}
}

// TestPendingUntilIDlessRoot: an ID-less exec root waits for its window's
// bound (start + 3W + AuditLag), by which the heuristic answers it; one
// that no request fits once its window closed says it waits for the TTL,
// and the row is handed out again to say so.
func TestPendingUntilIDlessRoot(t *testing.T) {
	start := t0.Add(time.Second)
	in := start.Add(time.Second)
	bound := start.Add(3*DefaultHeuristicWindow + DefaultAuditLag)
	closes := start.Add(DefaultHeuristicWindow + DefaultAuditLag)

	t.Run("answered", func(t *testing.T) {
		j := newJoiner(t)
		snap := newSnapshot()
		snap.apply(j.AddProcess(in, plainRoot("r", time.Second, capture.OriginOtherCgroup)))
		checkPending(t, "taken in", snap.procs["r"], bound)
		snap.apply(j.AddRecord(in.Add(time.Second), xr(idA)))
		checkPending(t, "a request fits, window open", snap.procs["r"], bound)
		snap.apply(j.Expire(bound))
		checkPending(t, "at the bound", snap.procs["r"], time.Time{})
		checkWant(t, "r", snap.procs["r"], want{attr: vocab.AttributionHeuristic, auditID: idA})
	})
	t.Run("no request", func(t *testing.T) {
		j := newJoiner(t)
		snap := newSnapshot()
		snap.apply(j.AddProcess(in, plainRoot("r", time.Second, capture.OriginOtherCgroup)))
		checkPending(t, "taken in", snap.procs["r"], bound)
		us := j.Expire(closes)
		snap.apply(us)
		if len(us) != 1 {
			t.Fatalf("window closed: %d updates, want the root's row again", len(us))
		}
		checkPending(t, "window closed, nothing fits", snap.procs["r"], in.Add(DefaultPendingTTL))
		snap.apply(j.Expire(in.Add(DefaultPendingTTL)))
		checkPending(t, "after the TTL", snap.procs["r"], time.Time{})
		checkWant(t, "r", snap.procs["r"], want{flags: []string{vocab.FlagUncoveredExec}})
	})
}

// TestPendingEvictedSaysSo: a process whose wait the MaxPending bound
// ended early is handed out again, no longer pending, even where its
// answer stays the same (a root of the container's own, which no request
// fits).
func TestPendingEvictedSaysSo(t *testing.T) {
	j := newJoiner(t, func(c *Config) { c.MaxPending = 1 })
	snap := newSnapshot()
	snap.apply(j.AddProcess(t0, plainRoot("a", 0, capture.OriginInside)))
	closed := t0.Add(DefaultHeuristicWindow + DefaultAuditLag)
	snap.apply(j.Expire(closed))
	checkPending(t, "window closed", snap.procs["a"], t0.Add(DefaultPendingTTL))
	us := j.AddProcess(closed, plainRoot("b", DefaultHeuristicWindow+DefaultAuditLag, capture.OriginInside))
	snap.apply(us)
	if len(us) != 2 {
		t.Fatalf("%d updates, want b's row and a's again", len(us))
	}
	checkPending(t, "evicted", snap.procs["a"], time.Time{})
	checkWant(t, "a", snap.procs["a"], want{})
	if st := j.Stats(); st.EvictedPending != 1 {
		t.Fatalf("evicted pending = %d, want 1", st.EvictedPending)
	}
}

// TestRestoreRowStillPending: a stored row that says it waits is handed
// out again after a restart (the restored process's wait is over); one
// whose deadline has passed is not.
func TestRestoreRowStillPending(t *testing.T) {
	now := t0.Add(time.Minute)
	for _, tc := range []struct {
		name  string
		until time.Time
		again bool
	}{
		{"deadline to come", now.Add(time.Minute), true},
		{"deadline passed", now.Add(-time.Second), false},
		{"never pending", time.Time{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := newJoiner(t)
			stored := pr("r", "runc", idA, vocab.SourceEnv)
			stored.ClaimedAuditID, stored.Flags, stored.PendingUntil = idA, []string{vocab.FlagNoAuditRecord}, tc.until
			us := j.RestoreProcesses(now, []Process{stored})
			if again := len(us) == 1; again != tc.again {
				t.Fatalf("%d updates, want the row again: %v", len(us), tc.again)
			}
			if tc.again {
				checkPending(t, "restored", *us[0].Process, time.Time{})
			}
		})
	}
}

func TestServeAt(t *testing.T) {
	until := t0.Add(time.Minute)
	for _, tc := range []struct {
		name  string
		until time.Time
		now   time.Time
		want  time.Time // zero: not pending
	}{
		{"before", until, until.Add(-time.Nanosecond), until},
		{"at", until, until, time.Time{}},
		{"after", until, until.Add(time.Hour), time.Time{}},
		{"none", time.Time{}, until, time.Time{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := Process{PendingUntil: tc.until}
			p.ServeAt(tc.now)
			checkPending(t, tc.name, p, tc.want)
		})
	}
}
