package join

import (
	"slices"
	"testing"
	"time"

	"github.com/execid/correlator/pkg/auditlog"
	"github.com/execid/correlator/pkg/vocab"
)

// TestJoinAnsweredLeaveAtTTL: a process its record answered leaves memory
// AnsweredLinger after its exit, late window or not (nothing later can answer it again), while
// one still waiting for its record is held for the window (the control).
// A second request under the answered ID, later than that, still flags the
// session's conflict: the responder sees it where the user is named.
func TestJoinAnsweredLeaveAtTTL(t *testing.T) {
	j := newJoiner(t)
	snap := newSnapshot()
	snap.apply(j.AddRecord(t0.Add(time.Second), xr(idA)))
	for _, p := range []Process{pr("a-root", "runc", idA, vocab.SourceEnv), pr("a-child", "a-root", idA, vocab.SourceInherited),
		pr("b-root", "runc", idB, vocab.SourceEnv)} {
		snap.apply(j.AddProcess(t0.Add(2*time.Second), p))
		snap.apply(j.AddExit(t0.Add(3*time.Second), Exit{ProcessID: p.ProcessID, Time: t0.Add(3 * time.Second)}))
	}
	if got := snap.procs["a-child"]; !got.Attribution.Counted() || got.AuditID != idA {
		t.Fatalf("a-child before the TTL: %s %q, want attributed to alice's session", got.Attribution, got.AuditID)
	}
	// Held for AnsweredLinger after their exit (a child exec'd as they
	// exit still reads them), then gone, the TTL still minutes off.
	snap.apply(j.Expire(t0.Add(3*time.Second + AnsweredLinger - time.Second)))
	if st := j.Stats(); st.Processes != 3 {
		t.Fatalf("before the linger: %d processes held, want all 3", st.Processes)
	}
	snap.apply(j.Expire(t0.Add(3*time.Second + AnsweredLinger)))
	if st := j.Stats(); st.Processes != 1 || j.procs.get("b-root") == nil {
		t.Fatalf("after the linger: %d processes held; want only b-root (no record yet)", st.Processes)
	}
	snap.apply(j.Expire(t0.Add(3*time.Second + DefaultPendingTTL + time.Second)))
	st := j.Stats()
	if st.Processes != 1 || st.LateKept != 1 {
		t.Fatalf("after the TTL: %d processes held, %d kept late; want only b-root (no record yet)", st.Processes, st.LateKept)
	}
	if j.procs.get("b-root") == nil {
		t.Fatal("b-root, still waiting for its record, left memory at the TTL")
	}
	// Another request under alice's ID, ten minutes on: kube-apiserver
	// never makes one; whoever forged it must not rename the session.
	forged := xr(idA)
	forged.User = auditlog.UserInfo{Username: "mallory", Groups: []string{"dev"}}
	forged.RequestURI += "&forged"
	forged.RequestReceivedTimestamp = t0.Add(10 * time.Minute)
	snap.apply(j.AddRecord(t0.Add(10*time.Minute), forged))
	s, ok := snap.sessions[idA]
	if !ok {
		t.Fatal("no session row for alice's ID")
	}
	if s.User.Username != "alice" || !slices.Contains(s.Flags, vocab.FlagAuditIDConflict) {
		t.Errorf("session after a later request under its ID: user %q flags %v; want alice, %s",
			s.User.Username, s.Flags, vocab.FlagAuditIDConflict)
	}
	if got := snap.procs["a-child"]; !got.Attribution.Counted() || got.AuditID != idA {
		t.Errorf("a-child after the forged request: %s %q, want its row unchanged", got.Attribution, got.AuditID)
	}
}

// TestJoinAnsweredAfterExitLeaveAtLinger: a process whose record comes
// after it exited (a session's records reach the node as it ends) leaves a
// linger after the record, not at the TTL; one whose record never comes
// stays for the TTL (the control).
func TestJoinAnsweredAfterExitLeaveAtLinger(t *testing.T) {
	j := newJoiner(t)
	snap := newSnapshot()
	for _, p := range []Process{pr("a-root", "runc", idA, vocab.SourceEnv), pr("b-root", "runc", idB, vocab.SourceEnv)} {
		snap.apply(j.AddProcess(t0.Add(time.Second), p))
		snap.apply(j.AddExit(t0.Add(2*time.Second), Exit{ProcessID: p.ProcessID, Time: t0.Add(2 * time.Second)}))
	}
	// A minute on, both still wait: neither may leave.
	for s := 5; s <= 60; s += 5 {
		snap.apply(j.Expire(t0.Add(time.Duration(s) * time.Second)))
	}
	if st := j.Stats(); st.Processes != 2 {
		t.Fatalf("a minute after their exit, unanswered: %d processes held, want 2", st.Processes)
	}
	snap.apply(j.AddRecord(t0.Add(61*time.Second), xr(idA)))
	if got := snap.procs["a-root"]; !got.Attribution.Counted() || got.AuditID != idA {
		t.Fatalf("a-root after its record: %s %q", got.Attribution, got.AuditID)
	}
	for s := 65; s <= 61+int(2*AnsweredLinger/time.Second); s += 5 {
		snap.apply(j.Expire(t0.Add(time.Duration(s) * time.Second)))
	}
	if j.procs.get("a-root") != nil {
		t.Error("a-root, answered after its exit, still held two lingers after its record")
	}
	if j.procs.get("b-root") == nil {
		t.Error("b-root, whose record has not come, left before the TTL")
	}
}

// TestJoinOrphanExitsLeaveAtLinger: an exit read before its exec still
// ends the process when the exec comes (the control); one whose exec never
// comes (a shell's forked child that ran a builtin) leaves OrphanLinger
// after it, the TTL minutes off.
func TestJoinOrphanExitsLeaveAtLinger(t *testing.T) {
	j := newJoiner(t)
	snap := newSnapshot()
	snap.apply(j.AddExit(t0, Exit{ProcessID: "fork-only", Time: t0}))
	snap.apply(j.AddExit(t0, Exit{ProcessID: "a-root", Time: t0.Add(time.Second)}))
	snap.apply(j.AddProcess(t0.Add(2*time.Second), pr("a-root", "runc", idA, vocab.SourceEnv)))
	if got := snap.procs["a-root"]; got.Exit.IsZero() {
		t.Fatal("a-root, its exit read before its exec, reads as running")
	}
	snap.apply(j.Expire(t0.Add(OrphanLinger - time.Second)))
	if len(j.orphans) != 1 {
		t.Fatalf("before the linger: %d orphan exits held, want fork-only's", len(j.orphans))
	}
	snap.apply(j.Expire(t0.Add(OrphanLinger)))
	if len(j.orphans) != 0 {
		t.Fatalf("after the linger: %d orphan exits held, want none", len(j.orphans))
	}
	// a-root's entry, stale since its exec came, goes a second later.
	snap.apply(j.Expire(t0.Add(OrphanLinger + time.Second)))
	if n := j.orphanq.size(); n != 0 {
		t.Fatalf("%d orphan exits still queued, want none", n)
	}
}
