package sqlite

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/execid/correlator/pkg/capture"
	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/store"
	"github.com/execid/correlator/pkg/vocab"
)

// runWorld is a random store history, written alike to a store that keeps
// settled processes in runs and to one that keeps every process a row.
type runWorld struct {
	t         *testing.T
	rng       *rand.Rand
	runs, ref *Store
	procs     map[string]join.Process // the last row written of each
	sessions  []string
}

func newRunWorld(t *testing.T, seed uint64) *runWorld {
	open := func(name string, noRuns bool) *Store {
		s, err := Open(filepath.Join(t.TempDir(), name), Config{SessionProcessLimit: 1 << 20}, zerolog.Nop())
		if err != nil {
			t.Fatal(err)
		}
		s.noRuns = noRuns
		t.Cleanup(func() { s.Close() })
		return s
	}
	w := &runWorld{t: t, rng: rand.New(rand.NewPCG(seed, 9)), runs: open("runs.db", false), ref: open("ref.db", true),
		procs: map[string]join.Process{}}
	for i := range 6 {
		w.sessions = append(w.sessions, fmt.Sprintf("00000000-0000-4000-8000-%012d", i))
	}
	var ss []join.Session
	for i, id := range w.sessions {
		s := session(id, []string{"alice", "bob", "carol"}[i%3], i)
		s.Namespace, s.Pod = []string{"team", "other"}[i%2], fmt.Sprintf("web-%d", i%3)
		ss = append(ss, s)
	}
	w.write(store.Batch{Sessions: ss})
	return w
}

func (w *runWorld) write(b store.Batch) {
	w.t.Helper()
	for _, s := range []*Store{w.runs, w.ref} {
		if err := s.Write(context.Background(), b); err != nil {
			w.t.Fatalf("Write: %v", err)
		}
	}
	for _, p := range slices.Concat(b.Processes, b.Exits) {
		w.procs[p.ProcessID] = p
	}
}

// process is a new random process, or (reuse) a later row of a stored one.
func (w *runWorld) process(i int, reuse bool) join.Process {
	r := w.rng
	if reuse && len(w.procs) > 0 {
		ids := slices.Sorted(func(yield func(string) bool) {
			for id := range w.procs {
				if !yield(id) {
					return
				}
			}
		})
		p := w.procs[ids[r.IntN(len(ids))]]
		w.settle(&p)
		return p
	}
	sess := w.sessions[r.IntN(len(w.sessions))]
	p := process(fmt.Sprintf("%d-%d", 1000+i, r.IntN(3)), sess, r.IntN(40)) // starts collide
	p.Start = p.Start.Add(time.Duration(r.IntN(3)) * time.Millisecond)
	p.ExecTime = p.Start.Add(time.Microsecond)
	p.Namespace, p.Pod, p.Container = []string{"team", "other"}[r.IntN(2)], fmt.Sprintf("web-%d", r.IntN(3)), []string{"app", "side"}[r.IntN(2)]
	p.Argv = []string{"/bin/sh", "-c", fmt.Sprintf("step %d", r.IntN(5))}
	p.Filename = []string{"/bin/sh", "/usr/bin/cc1", "/tmp/\xff\xfeevil"}[r.IntN(3)]
	p.Flags = [][]string{{}, {vocab.FlagEnvRemoved}}[r.IntN(2)]
	p.PID, p.PPID, p.UID = uint32(1000+i), uint32(r.IntN(5)), uint32(r.IntN(2))
	p.SessionRootID, p.Source = "root-"+sess, vocab.SourceInherited
	p.ContainerID = []string{"c0ffee", "c0ffee", "5ca1ab1e"}[r.IntN(3)] // a restarted container
	// Its own root (a burst of roots must share runs), none, or the session's.
	p.SessionRootID = []string{p.SessionRootID, p.SessionRootID, p.ProcessID, ""}[r.IntN(4)]
	p.PodUID = []string{"pod-uid", "pod-uid", ""}[r.IntN(3)]
	// The joiner's input, which canonical compares too: drawn from what
	// is drawn already, so the histories stay as they were.
	p.Captured = capture.KeyValue{Value: sess, Source: vocab.SourceInherited, Flags: p.Flags}
	p.ExecOrigin = []capture.Origin{"", capture.OriginInside, capture.OriginRuntimeChild}[p.PID%3]
	p.RecordDelay = float64(p.PPID) / 4
	w.settle(&p)
	return p
}

// settle gives p a random attribution and exit: runnable more often than not.
func (w *runWorld) settle(p *join.Process) {
	r := w.rng
	p.Attribution, p.ClaimedAuditID = vocab.AttributionInherited, ""
	switch r.IntN(8) {
	case 0:
		p.Attribution = vocab.AttributionAuditID
	case 2: // pending: no audit record yet
		p.Attribution, p.ClaimedAuditID, p.AuditID = vocab.AttributionNone, w.sessions[r.IntN(len(w.sessions))], ""
	case 1:
		p.Attribution, p.ClaimedAuditID, p.AuditID = vocab.AttributionAmbiguous, p.AuditID, ""
		if p.ClaimedAuditID == "" {
			p.ClaimedAuditID = w.sessions[0]
		}
	}
	if p.AuditID == "" && p.Attribution == vocab.AttributionInherited {
		p.AuditID = w.sessions[r.IntN(len(w.sessions))]
	}
	p.Exit, p.ExitCode = time.Time{}, nil
	if r.IntN(4) > 0 {
		p.Exit, p.ExitCode = p.Start.Add(time.Duration(1+r.IntN(60))*time.Second), ptr(r.IntN(3))
	}
	if r.IntN(10) == 0 {
		p.Confidence = 0.5
	}
}

// batch writes n processes: new ones, later rows of stored ones, and
// exits alone.
func (w *runWorld) batch(first, n int) {
	var b store.Batch
	for i := range n {
		p := w.process(first+i, w.rng.IntN(4) == 0)
		if old, ok := w.procs[p.ProcessID]; ok && w.rng.IntN(3) == 0 && old.Exit.IsZero() {
			old.Exit, old.ExitCode = old.Start.Add(time.Minute), ptr(1)
			b.Exits = append(b.Exits, old) // the exit alone, onto the stored row
			continue
		}
		b.Processes = append(b.Processes, p)
	}
	w.write(b)
}

// everyProcess pages through every process of f, checking that none is
// listed twice.
func everyProcess(t *testing.T, s *Store, f store.ProcessFilter) []join.Process {
	t.Helper()
	var out []join.Process
	seen := map[string]bool{}
	for pages := 0; ; pages++ {
		page, next, err := s.ListProcesses(context.Background(), f)
		if err != nil {
			t.Fatalf("ListProcesses(%+v): %v", f, err)
		}
		for _, p := range page {
			if seen[p.ProcessID] {
				t.Fatalf("ListProcesses(%+v) lists %s twice", f, p.ProcessID)
			}
			seen[p.ProcessID] = true
		}
		out = append(out, page...)
		if next == "" {
			return out
		}
		if pages > 10_000 {
			t.Fatalf("ListProcesses(%+v) pages without end", f)
		}
		f.Cursor = next
	}
}

// canonical is ps as JSON with their evidence, sorted: the two stores
// break ties in start by ids of their own, so pages compare as sets, and
// order by start apart.
func canonical(t *testing.T, ps []join.Process, newestFirst bool) []string {
	t.Helper()
	out := make([]string, len(ps))
	for i, p := range ps {
		if i > 0 && (newestFirst && p.Start.After(ps[i-1].Start) || !newestFirst && p.Start.Before(ps[i-1].Start)) {
			t.Fatalf("process %s out of order at %d", p.ProcessID, i)
		}
		b, err := json.Marshal(struct {
			join.Process
			Evidence detailEvidence `json:"evidence"`
		}{p, detailEvidence{p.Captured, p.SPO, p.Bridge, p.ExecOrigin}})
		if err != nil {
			t.Fatal(err)
		}
		out[i] = string(b)
	}
	slices.Sort(out)
	return out
}

// compare checks that every query reads alike from both stores.
func (w *runWorld) compare(stage string) {
	t := w.t
	t.Helper()
	filters := []store.ProcessFilter{{}, {Limit: 3}, {Pod: "web-1", Limit: 4}, {Namespace: "team"}, {Container: "side", Limit: 2},
		{AuditID: w.sessions[1]}, {User: "alice", Limit: 5}, {Group: "team-bob"}, {Attribution: vocab.AttributionInherited, Limit: 7},
		{Attribution: vocab.AttributionAmbiguous}, {Attribution: vocab.AttributionAuditID, Limit: 2}, {Command: "step 3", Limit: 2}, {Command: "-c"},
		{Since: base.Add(10 * time.Second), Until: base.Add(25 * time.Second), Limit: 3}, {Pod: "web-2", User: "carol", Command: "step"},
		{Unattributed: true, Limit: 3}, {Unattributed: true, Since: base.Add(10 * time.Second), Pod: "web-1", Limit: 2}}
	for i, f := range filters {
		// A command search looks its runs up by id, or walks them
		// skipping those that list none of its commands: both read alike.
		w.runs.cfg.CommandRuns = []int{1 << 20, 1}[i%2]
		got, want := everyProcess(t, w.runs, f), everyProcess(t, w.ref, f)
		if g, wn := canonical(t, got, true), canonical(t, want, true); !slices.Equal(g, wn) {
			t.Fatalf("%s: ListProcesses(%+v): runs read %d processes, rows %d:\n%s\nwant\n%s", stage, f, len(g), len(wn),
				strings.Join(g, "\n"), strings.Join(wn, "\n"))
		}
	}
	for _, id := range w.sessions {
		got, err1 := w.runs.GetSession(context.Background(), id)
		want, err2 := w.ref.GetSession(context.Background(), id)
		if err1 != nil || err2 != nil {
			t.Fatalf("GetSession(%s): %v, %v", id, err1, err2)
		}
		if g, wn := canonical(t, got.Processes, false), canonical(t, want.Processes, false); !slices.Equal(g, wn) {
			t.Fatalf("%s: GetSession(%s): %d processes, want %d", stage, id, len(g), len(wn))
		}
		if g, wn := canonical(t, got.Claimants, false), canonical(t, want.Claimants, false); !slices.Equal(g, wn) {
			t.Fatalf("%s: GetSession(%s): %d claimants, want %d", stage, id, len(g), len(wn))
		}
		w.compareTruncated(id)
		got.Processes, want.Processes, got.Claimants, want.Claimants = nil, nil, nil, nil
		if g, wn := fmt.Sprintf("%+v", got), fmt.Sprintf("%+v", want); g != wn {
			t.Fatalf("%s: GetSession(%s) reads\n%s\nwant\n%s", stage, id, g, wn)
		}
	}
}

// TestRunsReadAsRows: whatever is written (new processes, later rows of
// stored ones, exits alone, a process named twice in a batch), and after
// retention, a store keeping settled processes in runs answers every
// query as one keeping rows alone.
func TestRunsReadAsRows(t *testing.T) {
	for seed := range uint64(6) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			w := newRunWorld(t, seed)
			for i := range 12 {
				w.batch(i*40, 1+w.rng.IntN(40))
			}
			dup := w.process(9999, false)
			dup2 := dup
			dup2.Exit, dup2.ExitCode, dup2.Attribution, dup2.AuditID = dup.Start.Add(time.Second), ptr(0), vocab.AttributionInherited, w.sessions[2]
			w.write(store.Batch{Processes: []join.Process{dup, dup2}})
			w.compare("written")
			// Positive control: runs hold processes, and fewer rows are left.
			var runs, rows, refRows int
			for _, q := range []struct {
				s *Store
				n *int
				q string
			}{{w.runs, &runs, `SELECT coalesce(sum(n), 0) FROM process_runs`}, {w.runs, &rows, `SELECT count(*) FROM processes`},
				{w.ref, &refRows, `SELECT count(*) FROM processes`}} {
				if err := q.s.r.QueryRow(q.q).Scan(q.n); err != nil {
					t.Fatal(err)
				}
			}
			if runs == 0 || runs+rows != refRows {
				t.Fatalf("runs hold %d processes and rows %d, where the reference holds %d rows", runs, rows, refRows)
			}
			cut := base.Add(40 * time.Second)
			d1, err1 := w.runs.DeleteOlderThan(context.Background(), cut)
			d2, err2 := w.ref.DeleteOlderThan(context.Background(), cut)
			if err1 != nil || err2 != nil || d1 != d2 {
				t.Fatalf("DeleteOlderThan: %+v, %v; reference %+v, %v", d1, err1, d2, err2)
			}
			w.compare("after retention")
			checkRunCommands(t, w.runs)
			for i := range 4 {
				w.batch(1000+i*40, 1+w.rng.IntN(40))
			}
			w.compare("written again")
			checkRunCommands(t, w.runs)
		})
	}
}

// checkRunCommands: every command a run's lines name is listed for it,
// and nothing is listed for a run that is gone (the trigger).
func checkRunCommands(t *testing.T, s *Store) {
	t.Helper()
	var listed, missing, stale, low int
	for _, q := range []struct {
		n *int
		q string
	}{
		{&listed, `SELECT count(*) FROM process_run_commands`},
		{&missing, `SELECT count(*) FROM process_runs r, json_each(r.body) j WHERE j.value ->> '$.commandID' != 0 AND
			NOT EXISTS (SELECT 1 FROM process_run_commands c WHERE c.run = r.id AND c.command_id = j.value ->> '$.commandID')`},
		{&stale, `SELECT count(*) FROM process_run_commands c WHERE NOT EXISTS (SELECT 1 FROM process_runs r WHERE r.id = c.run)`},
		// A bound below its run's last start would stop a search's walk
		// before that run (commandRuns).
		{&low, `SELECT count(*) FROM process_run_commands c JOIN process_runs r ON r.id = c.run WHERE c.last_start < r.last_start`},
	} {
		if err := s.r.QueryRow(q.q).Scan(q.n); err != nil {
			t.Fatal(err)
		}
	}
	if listed == 0 || missing != 0 || stale != 0 || low != 0 {
		t.Fatalf("run commands: %d listed, %d of the runs' lines' missing, %d of deleted runs', %d bounds below their run's last start",
			listed, missing, stale, low)
	}
}

// compareTruncated checks a session's oldest five processes against the
// reference's: the same starts (ties may fall to either side of the cut,
// each store naming them by ids of its own), and both truncated alike.
func (w *runWorld) compareTruncated(id string) {
	t := w.t
	t.Helper()
	var starts [2][]int64
	var truncated [2]bool
	for i, s := range []*Store{w.runs, w.ref} {
		keep := s.cfg.SessionProcessLimit
		s.cfg.SessionProcessLimit = 5
		d, err := s.GetSession(context.Background(), id)
		s.cfg.SessionProcessLimit = keep
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range d.Processes {
			starts[i] = append(starts[i], nanos(p.Start))
		}
		truncated[i] = d.ProcessesTruncated
	}
	if !slices.Equal(starts[0], starts[1]) || truncated[0] != truncated[1] {
		t.Fatalf("GetSession(%s) of five: starts %v (truncated %v), want %v (%v)", id, starts[0], truncated[0], starts[1], truncated[1])
	}
}
