package storetest

import (
	"context"
	"testing"

	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/store"
)

// testExits: a process written whole and later as an exit alone
// (Batch.Exits) reads back as its whole row with the exit; an exit alone
// for a process the store lacks is stored whole; and, in one batch, an
// exit alone beside the whole row of another process leaves that row as
// written. Control: before its exit, the row has none.
func testExits(t *testing.T, s store.Backend) {
	write(t, s, store.Batch{Sessions: []join.Session{session("s1", "alice", 0)}})
	running := process("p1", "s1", 2)
	write(t, s, store.Batch{Processes: []join.Process{running}})
	if got := sessionProcesses(t, s, "s1"); len(got) != 1 || !got[0].Exit.IsZero() || got[0].ExitCode != nil {
		t.Fatalf("control: before its exit the row reads %+v", got)
	}

	exited := running
	exited.Exit, exited.ExitCode = at(3), ptr(7)
	never := process("p2", "s1", 4) // its whole row never written
	never.Exit, never.ExitCode = at(5), ptr(0)
	other := process("p3", "s1", 6)
	write(t, s, store.Batch{Processes: []join.Process{other}, Exits: []join.Process{exited, never}})
	sameJSON(t, "exits alone, and a process written whole beside them", sessionProcesses(t, s, "s1"),
		[]join.Process{exited, never, other})
}

func sessionProcesses(t *testing.T, s store.Backend, auditID string) []join.Process {
	t.Helper()
	d, err := s.GetSession(context.Background(), auditID)
	if err != nil {
		t.Fatal(err)
	}
	return d.Processes
}
