package sqlite

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/store"
)

// TestFewCommandRows: a listing reads a command's rows by command while
// they number under Config.CommandRows, counting a pod's alone where it
// names one, and walks them from that many on.
func TestFewCommandRows(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	var ps []join.Process
	for i, pod := range []string{"a", "a", "a", "b"} {
		p := process(fmt.Sprintf("p-%d", i), "", i) // running: a row each
		p.Pod, p.Argv = pod, []string{"/bin/sleep", fmt.Sprint(i)}
		ps = append(ps, p)
	}
	other := process("q", "", 9)
	other.Pod, other.Argv = "b", []string{"/bin/true"}
	if err := s.Write(ctx, store.Batch{Processes: append(ps, other)}); err != nil {
		t.Fatal(err)
	}
	s.cfg.CommandRows = 3
	for _, c := range []struct {
		f    store.ProcessFilter
		want bool
	}{
		{store.ProcessFilter{Command: "/bin/sleep", Pod: "b"}, true},  // one row
		{store.ProcessFilter{Command: "/bin/true"}, true},             // one row
		{store.ProcessFilter{Command: "/bin/sleep 1"}, true},          // one row
		{store.ProcessFilter{Command: "/bin/sleep", Pod: "a"}, false}, // three rows
		{store.ProcessFilter{Command: "/bin/sleep"}, false},           // four
		{store.ProcessFilter{Command: "/bin/"}, false},
		{store.ProcessFilter{}, false}, // no command: nothing to read by
	} {
		m, err := s.matchCommands(ctx, c.f.Command)
		if err != nil {
			t.Fatal(err)
		}
		_, got, err := s.fewCommandRows(ctx, c.f, m)
		if err != nil || got != c.want {
			t.Errorf("fewCommandRows(%+v) = %v, %v; want %v", c.f, got, err, c.want)
		}
		// Either way the page is the same: each row of the pod whose line
		// holds the substring.
		if c.f.Command == "" {
			continue
		}
		page, _, err := s.ListProcesses(ctx, c.f)
		want := 0
		for _, p := range append(ps, other) {
			if (c.f.Pod == "" || p.Pod == c.f.Pod) && strings.Contains(strings.Join(p.Argv, " "), c.f.Command) {
				want++
			}
		}
		if err != nil || len(page) != want || want == 0 {
			t.Errorf("ListProcesses(%+v): %d processes, %v; want %d", c.f, len(page), err, want)
		}
	}
	// More commands than a listing names by id: walked.
	if _, got, err := s.fewCommandRows(ctx, store.ProcessFilter{Command: "x"}, commandMatch{all: true}); got || err != nil {
		t.Errorf("fewCommandRows of every command = %v, %v; want false", got, err)
	}
}
