package sqlite

import (
	"slices"
	"testing"

	"github.com/execid/correlator/pkg/store"
)

// TestMigrateFromV10: a version-10 file's runs gain the list of their
// commands, read from their lines, and a command search finds in them
// what it found before the upgrade (when it read every run's body), by
// either of its ways.
func TestMigrateFromV10(t *testing.T) {
	w, searches := commandSearchWorld(t, 3)
	// The same file at version 10: no list, no trigger.
	path := olderCopy(t, w.runs, "v10.db", `DROP TRIGGER process_runs_forget_commands`, `DROP TABLE process_run_commands`,
		`DROP INDEX commands_span`, `PRAGMA user_version = 10`)

	s := openMigrated(t, path)
	checkRunCommands(t, s)
	searches.check(t, s)
}

// commandSearches are a few command searches and what a store answered.
type commandSearches struct {
	filters []store.ProcessFilter
	before  [][]string
}

// commandSearchWorld is a store of runs from seed, and what it answers to
// a few command searches.
func commandSearchWorld(t *testing.T, seed uint64) (*runWorld, commandSearches) {
	w := newRunWorld(t, seed)
	for i := range 8 {
		w.batch(i*40, 1+w.rng.IntN(40))
	}
	cs := commandSearches{filters: []store.ProcessFilter{{Command: "step 3"}, {Command: "-c", Limit: 5}, {Command: "step", Pod: "web-1"}}}
	for _, f := range cs.filters {
		cs.before = append(cs.before, canonical(t, everyProcess(t, w.runs, f), true))
	}
	return w, cs
}

// check asks s the searches, its runs looked up by id or walked in page
// order, and compares the answers with the ones before.
func (cs commandSearches) check(t *testing.T, s *Store) {
	t.Helper()
	for i, f := range cs.filters {
		for _, limit := range []int{1 << 20, 1} {
			s.cfg.CommandRuns = limit
			if got := canonical(t, everyProcess(t, s, f), true); !slices.Equal(got, cs.before[i]) || len(got) == 0 {
				t.Fatalf("ListProcesses(%+v) after the upgrade, %d runs looked up: %d processes, want %d (and some)",
					f, limit, len(got), len(cs.before[i]))
			}
		}
	}
}
