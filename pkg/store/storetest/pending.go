package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/store"
	"github.com/execid/correlator/pkg/vocab"
)

// waiting is an unattributed process of the fixtures' pod that waits
// until the deadline at seconds (with nanoseconds), claiming auditID if
// one is given; the store keeps the deadline, not Pending (the API
// derives it).
func waiting(id, claimed string, seconds, until int) join.Process {
	p := process(id, "", seconds)
	p.Attribution, p.Source, p.Confidence, p.ClaimedAuditID = vocab.AttributionNone, "", 0, claimed
	p.PendingUntil = at(until).Add(time.Nanosecond)
	return p
}

// testPendingUntil: a waiting process's deadline reads back as written,
// running or exited (a backend may keep the exited one apart, in a run),
// through the list and a session's claimants, and after an exit written
// alone onto its row; writing the process again without one (its answer
// came) clears it. Control: a process never waiting reads back none.
func testPendingUntil(t *testing.T, s store.Backend) {
	ctx := context.Background()
	write(t, s, store.Batch{Sessions: []join.Session{session("s1", "alice", 0)}})
	running := waiting("running", "s1", 2, 60)
	exited := waiting("exited", "", 3, 61)
	exited.Exit, exited.ExitCode = at(4), ptr(0)
	plain := process("plain", "s1", 5)
	write(t, s, store.Batch{Processes: []join.Process{running, exited, plain}})
	if plain.PendingUntil.IsZero() == running.PendingUntil.IsZero() {
		t.Fatal("control: the fixtures do not tell waiting from not")
	}
	list := func(what string, f store.ProcessFilter, want ...join.Process) {
		t.Helper()
		got, _, err := s.ListProcesses(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		samePending(t, what, got, want)
	}
	list("listed", store.ProcessFilter{}, plain, exited, running)
	list("listed unattributed", store.ProcessFilter{Unattributed: true}, exited, running)
	d, err := s.GetSession(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	samePending(t, "session's claimants", d.Claimants, []join.Process{running})

	// Its exit alone keeps the deadline the row holds.
	ended := running
	ended.Exit, ended.ExitCode = at(7), ptr(1)
	write(t, s, store.Batch{Exits: []join.Process{ended}})
	list("after an exit alone", store.ProcessFilter{}, plain, exited, ended)

	// The answers came: the rows say they no longer wait.
	answered, gave := ended, exited
	answered.PendingUntil, answered.AuditID, answered.ClaimedAuditID = time.Time{}, "s1", ""
	answered.Attribution, answered.Source = vocab.AttributionAuditID, vocab.SourceEnv
	gave.PendingUntil, gave.Flags = time.Time{}, []string{vocab.FlagUncoveredExec}
	write(t, s, store.Batch{Processes: []join.Process{answered, gave}})
	list("answered", store.ProcessFilter{}, plain, gave, answered)
}

// samePending checks got against want, the deadlines as instants, the
// rest as the API serves it.
func samePending(t *testing.T, what string, got, want []join.Process) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d processes, want %d", what, len(got), len(want))
	}
	for i := range got {
		if g, w := got[i].PendingUntil, want[i].PendingUntil; !g.Equal(w) || got[i].Pending {
			t.Errorf("%s: %s reads back pending %v until %v, want until %v", what, got[i].ProcessID, got[i].Pending, g, w)
		}
	}
	sameJSON(t, what, got, want)
}
