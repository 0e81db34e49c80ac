package sqlite

import (
	"context"
	"fmt"
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

// A batch's new processes are inserted (no statement journal) and, from
// the first chunk that meets a stored process on, upserted: every row ends
// as written, those stored before replaced, none twice; a chunk that stops
// at its conflict and goes no further loses the rows after it (58 of 80).
func TestInsertFallsBackToUpsert(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	mk := func(i int, argv string) join.Process {
		p := process(fmt.Sprintf("p%03d", i), "a1", i)
		p.Argv = []string{argv}
		return p
	}
	var first []join.Process
	for i := range 40 { // two chunks: 32 and 8
		first = append(first, mk(i, "old"))
	}
	if err := s.Write(ctx, store.Batch{Processes: first}); err != nil {
		t.Fatal(err)
	}
	// New rows around stored ones, in both chunks, one key twice.
	var second []join.Process
	for i := 30; i < 80; i++ {
		second = append(second, mk(i, "new"))
	}
	second = append(second, mk(35, "newer"))
	if err := s.Write(ctx, store.Batch{Processes: second}); err != nil {
		t.Fatal(err)
	}
	got, _, err := s.ListProcesses(ctx, store.ProcessFilter{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 80 {
		t.Fatalf("%d rows, want 80", len(got))
	}
	for _, p := range got {
		var i int
		fmt.Sscanf(p.ProcessID, "p%03d", &i)
		want := "old"
		switch {
		case i == 35:
			want = "newer"
		case i >= 30:
			want = "new"
		}
		if len(p.Argv) != 1 || p.Argv[0] != want {
			t.Errorf("%s: argv %q, want %q", p.ProcessID, p.Argv, want)
		}
	}
}
