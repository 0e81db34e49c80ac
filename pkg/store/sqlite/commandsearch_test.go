package sqlite

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/store"
)

// fullMatch is a command search without the store's memory: every line
// matched again, as before lineSearches.
func fullMatch(t *testing.T, s *Store, sub string) commandMatch {
	t.Helper()
	rows, err := s.r.Query(matchCommandsSQL+" ORDER BY id", sub)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var m commandMatch
	for rows.Next() {
		var id, first, last int64
		if err := rows.Scan(&id, &first, &last); err != nil {
			t.Fatal(err)
		}
		m.add(id, first, last)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	m.ids = padIDs(m.ids)
	return m
}

// TestCommandSearchRemembersMatches: a search that reads only the lines
// stored since the last search for its substring finds what matching
// every line finds, through new commands, widened spans and retention
// deleting some commands or all of them. Positive control: the searches
// find something (a store where nothing matched would pass vacuously).
func TestCommandSearchRemembersMatches(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(46, 11))
	words := []string{"/bin/sleep", "5", "rm", "-rf", "/tmp/x", "cat", "/etc/passwd", "sh", "-c", "é"}
	subs := []string{"sleep 5", "rm", "/tmp", "cat /etc", "sh -c", "-rf /tmp/x", "5", "é"}
	sec, n, found := 0, 0, 0
	check := func(when string) {
		t.Helper()
		for _, sub := range subs {
			got, err := s.matchCommands(ctx, sub)
			if err != nil {
				t.Fatal(err)
			}
			want := fullMatch(t, s, sub)
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("%s, %q: remembered search %+v, every line matched %+v", when, sub, got, want)
			}
			found += len(want.set)
		}
	}
	for round := range 40 {
		var batch []join.Process
		for range 1 + rng.IntN(12) {
			argv := make([]string, 1+rng.IntN(4))
			for i := range argv {
				argv[i] = words[rng.IntN(len(words))]
			}
			p := process(fmt.Sprintf("p-%d", n), "", sec)
			p.Argv, p.Exit, p.ExitCode = argv, p.Start.Add(time.Second), ptr(0)
			batch = append(batch, p)
			n, sec = n+1, sec+1+rng.IntN(3)
		}
		if err := s.Write(ctx, store.Batch{Processes: batch}); err != nil {
			t.Fatal(err)
		}
		check(fmt.Sprintf("round %d, written", round))
		if rng.IntN(3) == 0 {
			// Up to everything, some rounds: every command then goes but
			// the newest.
			cut := base.Add(time.Duration(rng.IntN(sec+20)) * time.Second)
			if _, err := s.DeleteOlderThan(ctx, cut); err != nil {
				t.Fatal(err)
			}
			check(fmt.Sprintf("round %d, retention to %s", round, cut.Sub(base)))
		}
	}
	if found == 0 {
		t.Fatal("no search found a command")
	}
}

// TestRetentionKeepsNewestCommand: retention deletes every command no
// process needs but the newest, so the next command's id is past every
// id deleted, and a search remembered from before finds it.
func TestRetentionKeepsNewestCommand(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	writeExitedLines(t, s, "rm -rf /a", "rm -rf /b", "cat /c")
	before, err := s.matchCommands(ctx, "rm -rf")
	if err != nil || len(before.set) != 2 { // positive control
		t.Fatalf("before retention: %+v, %v; want the two rm lines", before, err)
	}
	if _, err := s.DeleteOlderThan(ctx, base.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	var left int
	var top int64
	if err := s.r.QueryRow(`SELECT count(*), max(id) FROM commands`).Scan(&left, &top); err != nil {
		t.Fatal(err)
	}
	if left != 1 {
		t.Fatalf("%d commands left after retention past every process, want the newest alone", left)
	}
	p := process("p-late", "", 7200)
	p.Argv, p.Exit, p.ExitCode = []string{"rm", "-rf", "/d"}, p.Start.Add(time.Second), ptr(0)
	if err := s.Write(ctx, store.Batch{Processes: []join.Process{p}}); err != nil {
		t.Fatal(err)
	}
	after, err := s.matchCommands(ctx, "rm -rf")
	if err != nil {
		t.Fatal(err)
	}
	if len(after.set) != 1 || len(after.ids) == 0 || after.ids[0].(int64) <= top {
		t.Fatalf("after retention: %+v; want the new rm line alone, its id past %d", after, top)
	}
	page, _, err := s.ListProcesses(ctx, store.ProcessFilter{Command: "rm -rf"})
	if err != nil || len(page) != 1 || page[0].ProcessID != "p-late" {
		t.Fatalf("processes running rm -rf: %+v, %v; want p-late", page, err)
	}
}

// writeExitedLines writes one exited process p-<i> per command line, the
// i-th started i seconds past base.
func writeExitedLines(t *testing.T, s *Store, lines ...string) {
	t.Helper()
	var batch []join.Process
	for i, line := range lines {
		p := process(fmt.Sprintf("p-%d", i), "", i)
		p.Argv, p.Exit, p.ExitCode = strings.Fields(line), p.Start.Add(time.Second), ptr(0)
		batch = append(batch, p)
	}
	if err := s.Write(context.Background(), store.Batch{Processes: batch}); err != nil {
		t.Fatal(err)
	}
}
