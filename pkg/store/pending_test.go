package store

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/execid/correlator/internal/testutil"
	"github.com/execid/correlator/pkg/join"
)

// pendingKinds renders where each process of b is: "w" whole, "x" an exit
// alone, with its PID (the tests' version of a row).
func pendingKinds(b Batch) []string {
	var out []string
	for _, p := range b.Processes {
		out = append(out, "w "+p.ProcessID+" "+strconv.Itoa(int(p.PID)))
	}
	for _, p := range b.Exits {
		out = append(out, "x "+p.ProcessID+" "+strconv.Itoa(int(p.PID)))
	}
	slices.Sort(out)
	return out
}

// A process pending whole stays whole when its exit alone follows (the
// store lacks the row until the commit); one pending as an exit alone
// becomes whole when a whole row follows; the last row of a key wins
// either way, and every key is one row.
func TestPendingCollapsesExits(t *testing.T) {
	row := func(id string, v uint32) join.Process { p := process(id, "a", 0); p.PID = v; return p }
	cases := []struct {
		name  string
		adds  []Batch
		whole bool
		want  []string
	}{
		{"an exit alone after its whole row stays whole", []Batch{
			{Processes: []join.Process{row("p", 1)}}, {Exits: []join.Process{row("p", 2)}}}, false, []string{"w p 2"}},
		{"an exit alone after an exit alone", []Batch{
			{Exits: []join.Process{row("p", 1)}}, {Exits: []join.Process{row("p", 2)}}}, false, []string{"x p 2"}},
		{"a whole row after an exit alone is whole", []Batch{
			{Exits: []join.Process{row("p", 1)}}, {Processes: []join.Process{row("p", 2)}}}, false, []string{"w p 2"}},
		{"moving one of several exits keeps the others' places", []Batch{
			{Exits: []join.Process{row("p", 1), row("q", 1), row("r", 1)}},
			{Processes: []join.Process{row("p", 2)}},
			{Exits: []join.Process{row("r", 3), row("q", 4)}}}, false,
			[]string{"w p 2", "x q 4", "x r 3"}},
		{"after a loss every exit is whole", []Batch{
			{Exits: []join.Process{row("p", 1)}}, {Exits: []join.Process{row("q", 1)}}}, true,
			[]string{"w p 1", "w q 1"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var p pending
			for _, b := range c.adds {
				p.add(b, c.whole)
			}
			if got := pendingKinds(p.batch()); !slices.Equal(got, c.want) {
				t.Fatalf("pending %v, want %v", got, c.want)
			}
			if p.rows != len(c.want) {
				t.Fatalf("%d rows counted, want %d", p.rows, len(c.want))
			}
		})
	}
}

// Once the writer has dropped rows, an exit alone may follow a row the
// store never got or holds older: from then on exits are written whole.
// Control: before the loss, an exit alone stays one.
func TestWriterWritesExitsWholeAfterALoss(t *testing.T) {
	r := recorder{}
	w := NewWriter(&r, 1000, time.Hour, WithMaxHeld(1), WithRetry(time.Millisecond, time.Millisecond))
	defer w.Close()
	ctx := context.Background()
	w.Add(ctx, Batch{Exits: []join.Process{process("before", "a", 0)}})
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	r.fail = errors.New("disk full")
	r.mu.Unlock()
	w.Add(ctx, Batch{Processes: []join.Process{process("held", "a", 0)}})
	if err := w.Flush(ctx); err == nil {
		t.Fatal("the commit did not fail")
	}
	w.Add(ctx, Batch{Processes: []join.Process{process("dropped", "a", 0)}}) // beyond maxHeld
	testutil.Eventually(t, "the writer dropped a row", func() bool { return w.Stats().Dropped == 1 })
	r.mu.Lock()
	r.fail = nil
	r.mu.Unlock()
	testutil.Eventually(t, "the writer recovered", func() bool { return w.Healthy() == nil })
	w.Add(ctx, Batch{Exits: []join.Process{process("after", "a", 0)}})
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var got []string
	for _, b := range r.batches {
		got = append(got, pendingKinds(b)...)
	}
	slices.Sort(got)
	if want := []string{"w after 100", "w held 100", "x before 100"}; !slices.Equal(got, want) {
		t.Fatalf("written %v, want %v", got, want)
	}
}
