package sqlite

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/execid/correlator/internal/testutil"
	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/store"
)

func TestDeleteOlderThan(t *testing.T) {
	// A chunk of 2 makes every step loop.
	s, err := Open(filepath.Join(t.TempDir(), "s.db"), Config{DeleteChunk: 2}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	cut := base.Add(time.Hour)
	at := func(d time.Duration) time.Time { return base.Add(d) }

	// old: ended before cut, all processes exited before cut → deleted.
	old := session("old", "alice", 0)
	oldP := []join.Process{process("old-1", "old", 1), process("old-2", "old", 2), process("old-3", "old", 3)}
	for i := range oldP {
		oldP[i].Exit = at(time.Minute)
	}
	// daemon: ended before cut, but its nohup'd child still runs → kept.
	daemon := session("daemon", "bob", 1)
	daemonP := []join.Process{process("daemon-1", "daemon", 60), process("daemon-2", "daemon", 61)}
	daemonP[0].Exit = at(2 * time.Minute)
	// late: its process exited after cut → kept.
	late := session("late", "carol", 2)
	lateP := process("late-1", "late", 120)
	lateP.Exit = at(2 * time.Hour)
	// open: never seen to end, received before cut, no processes → deleted.
	open := session("open", "dave", 3)
	open.EndTimestamp = time.Time{}
	// recent: received after cut → kept.
	recent := session("recent", "erin", 120)
	// stray: an exited process with no session → deleted.
	stray := process("stray", "", 5)
	stray.Exit = at(10 * time.Minute)

	procs := append(append(oldP, daemonP...), lateP, stray)
	recs := []store.AuditRecord{
		{AuditID: "old", Stage: "RequestReceived", StageTimestamp: base, Event: json.RawMessage(`{}`)},
		{AuditID: "old", Stage: "ResponseComplete", StageTimestamp: base, Event: json.RawMessage(`{}`)},
		{AuditID: "daemon", Stage: "ResponseComplete", StageTimestamp: base, Event: json.RawMessage(`{}`)},
		{AuditID: "orphan", Stage: "ResponseComplete", StageTimestamp: base, Event: json.RawMessage(`{}`)},
		{AuditID: "orphan-new", Stage: "ResponseComplete", StageTimestamp: cut, Event: json.RawMessage(`{}`)},
	}
	alerts := []store.Alert{{ID: "a-old", Time: base}, {ID: "a-new", Time: cut}}
	if err := s.Write(ctx, store.Batch{Sessions: []join.Session{old, daemon, late, open, recent}, Processes: procs,
		AuditRecords: recs, Alerts: alerts}); err != nil {
		t.Fatal(err)
	}

	d, err := s.DeleteOlderThan(ctx, cut)
	if err != nil {
		t.Fatal(err)
	}
	want := store.Deleted{Sessions: 2, Processes: 5, AuditRecords: 3, Alerts: 1}
	if d != want {
		t.Errorf("deleted %+v, want %+v", d, want)
	}
	if got := sessionIDs(allSessions(t, s, store.SessionFilter{})); !slices.Equal(got, []string{"recent", "late", "daemon"}) {
		t.Errorf("sessions left: %v", got)
	}
	ps, _, _ := s.ListProcesses(ctx, store.ProcessFilter{})
	if got := processIDs(ps); !slices.Equal(got, []string{"late-1", "daemon-2"}) {
		t.Errorf("processes left: %v", got)
	}
	if got := sessionIDs(allSessions(t, s, store.SessionFilter{Group: "team-alice"})); len(got) != 0 {
		t.Errorf("group rows of deleted sessions still match: %v", got)
	}
	var groupRows, recRows int
	s.r.QueryRow("SELECT count(*) FROM session_groups").Scan(&groupRows)
	s.r.QueryRow("SELECT count(*) FROM audit_records").Scan(&recRows)
	if groupRows != 6 || recRows != 2 {
		t.Errorf("%d group rows (want 6), %d audit records (want 2)", groupRows, recRows)
	}
	dd, _ := s.GetSession(ctx, "daemon")
	if dd.ProcessCount != 1 || len(dd.AuditRecords) != 1 {
		t.Errorf("daemon kept %d processes and %d records", dd.ProcessCount, len(dd.AuditRecords))
	}
	// A second pass finds nothing more.
	if d, err := s.DeleteOlderThan(ctx, cut); err != nil || d != (store.Deleted{}) {
		t.Errorf("second pass deleted %+v, %v", d, err)
	}
}

func TestRunRetention(t *testing.T) {
	s := openTest(t)
	old := session("old", "alice", 0)
	old.RequestReceivedTimestamp, old.EndTimestamp = time.Now().Add(-48*time.Hour), time.Now().Add(-47*time.Hour)
	mustUpsert(t, s, []join.Session{old}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.RunRetention(ctx, time.Hour, 10*time.Millisecond) }()
	testutil.Eventually(t, "the retention loop deleted the old session", func() bool {
		_, err := s.GetSession(context.Background(), "old")
		return err != nil
	})
	cancel()
	if err := <-done; err != context.Canceled {
		t.Errorf("RunRetention = %v", err)
	}
	if err := s.RunRetention(context.Background(), 0, time.Second); err == nil {
		t.Error("RunRetention accepted a zero max age")
	}
}

// Retention walks processes_start past running processes: with a chunk of
// 3 and every third process of 30 still running, every process that
// exited before the cut goes, whichever chunk it falls in, and only those.
// Positive control: the walk took more chunks than one.
func TestDeleteProcessesWalksPastRunning(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "s.db"), Config{DeleteChunk: 3}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	cut := base.Add(time.Hour)
	var procs []join.Process
	var kept []string
	for i := range 30 {
		p := process(fmt.Sprintf("p%02d", i), "a", i)
		switch {
		case i%3 == 0: // running
			kept = append(kept, p.ProcessID)
		case i == 20: // exited after the cut
			p.Exit = cut.Add(time.Minute)
			kept = append(kept, p.ProcessID)
		default:
			p.Exit = p.Start.Add(time.Minute)
		}
		procs = append(procs, p)
	}
	after := process("after", "a", 7200) // started after the cut, exited
	after.Exit = after.Start.Add(time.Second)
	procs = append(procs, after)
	kept = append(kept, "after")
	mustUpsert(t, s, nil, procs)
	d, err := s.DeleteOlderThan(ctx, cut)
	if err != nil {
		t.Fatal(err)
	}
	got, _, err := s.ListProcesses(ctx, store.ProcessFilter{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	ids := processIDs(got)
	slices.Sort(ids)
	slices.Sort(kept)
	if !slices.Equal(ids, kept) || d.Processes != int64(31-len(kept)) {
		t.Fatalf("kept %v (deleted %d), want %v (deleted %d)", ids, d.Processes, kept, 31-len(kept))
	}
}

// TestRunRetentionBoundsBodies: retention reads at most about
// maxRetentionChunkBytes of run bodies a transaction, whatever
// DeleteChunk says, and still deletes every process that exited before
// the cut, in as many transactions as it takes, and only those. 24 runs
// of 600 processes, each line about 400 bytes, are 5.8 MB: more than one
// transaction's worth (the positive control checks the size).
func TestRunRetentionBoundsBodies(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	long := "/opt/" + strings.Repeat("x", 300)
	var batch []join.Process
	for r := range 24 {
		for i := range 600 {
			p := process(fmt.Sprintf("%d-%d", r, i), "s", r*10)
			p.Filename, p.Exit, p.ExitCode = long, p.Start.Add(time.Second), ptr(0)
			if r >= 20 {
				p.Exit = base.Add(time.Hour) // exits after the cut: kept
			}
			batch = append(batch, p)
		}
		if err := s.Write(ctx, store.Batch{Processes: batch}); err != nil {
			t.Fatal(err)
		}
		batch = batch[:0]
	}
	var bodies int
	if err := s.r.QueryRow(`SELECT sum(length(body)) FROM process_runs`).Scan(&bodies); err != nil {
		t.Fatal(err)
	}
	if bodies < maxRetentionChunkBytes+maxRetentionChunkBytes/4 {
		t.Fatalf("the runs' bodies are %d bytes: too few for more than one transaction", bodies)
	}
	// The first transaction stops at the bound, with more to do.
	cut := nanos(base.Add(30 * time.Minute))
	first, _, more, err := s.deleteRunChunk(ctx, cut, cursor{t: math.MinInt64, id: math.MinInt64})
	if err != nil || !more || first == 0 || first > maxRetentionChunkBytes/300 {
		t.Fatalf("first retention transaction: %d processes, more %v, %v; want a bounded share and more", first, more, err)
	}
	d, err := s.DeleteOlderThan(ctx, base.Add(30*time.Minute))
	d.Processes += first
	if err != nil || d.Processes != 20*600 {
		t.Fatalf("DeleteOlderThan: %+v, %v; want the 12,000 processes that exited before the cut", d, err)
	}
	if left := everyProcess(t, s, store.ProcessFilter{}); len(left) != 4*600 {
		t.Fatalf("%d processes left, want the 2,400 that exited after the cut", len(left))
	}
}
