package sqlite

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/store"
)

// An exit alone (Batch.Exits) writes the exit columns of the stored row
// and nothing else: the row's other columns stay as stored even where the
// exit's row says otherwise, which is what makes it cheap (one index, not
// nine). Control: the same row as a whole process rewrites them.
func TestExitAloneWritesOnlyTheExit(t *testing.T) {
	ctx := context.Background()
	for _, whole := range []bool{false, true} {
		s := openTest(t)
		p := process("p1", "a1", 1)
		mustUpsert(t, s, nil, []join.Process{p})
		later := p
		later.Argv, later.Pod = []string{"/bin/other"}, "elsewhere"
		later.Exit, later.ExitCode = p.Start.Add(time.Second), ptr(3)
		b := store.Batch{Exits: []join.Process{later}}
		if whole {
			b = store.Batch{Processes: []join.Process{later}}
		}
		if err := s.Write(ctx, b); err != nil {
			t.Fatal(err)
		}
		got, _, err := s.ListProcesses(ctx, store.ProcessFilter{})
		if err != nil || len(got) != 1 {
			t.Fatalf("listing: %v, %d rows", err, len(got))
		}
		g := got[0]
		if !g.Exit.Equal(later.Exit) || g.ExitCode == nil || *g.ExitCode != 3 {
			t.Fatalf("whole %v: exit %v code %v, want %v 3", whole, g.Exit, g.ExitCode, later.Exit)
		}
		kept := slices.Equal(g.Argv, p.Argv) && g.Pod == p.Pod
		if kept == whole {
			t.Fatalf("whole %v: argv %q pod %q after the write (stored %q %q, written %q %q)",
				whole, g.Argv, g.Pod, p.Argv, p.Pod, later.Argv, later.Pod)
		}
	}
}
