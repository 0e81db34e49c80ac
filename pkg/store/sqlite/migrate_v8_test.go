package sqlite

import (
	"context"
	"testing"
	"time"

	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/store"
	"github.com/execid/correlator/pkg/vocab"
)

// TestMigrateFromV8: a version-8 file gains the runs and their keys; its
// rows stay rows, a later row of one of them is written onto it (not into
// a run, which would store the process twice), and a process new to the
// file goes to a run.
func TestMigrateFromV8(t *testing.T) {
	db, path := oldFile(t, 8, nil)
	old := process("old", "s", 1)
	old.Attribution, old.Source = vocab.AttributionInherited, vocab.SourceInherited
	var pa processArgs
	if err := pa.add(&old, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(insertProcessSQLs[1], pa.args...); err != nil {
		t.Fatal(err)
	}
	var tables int
	if err := db.QueryRow(`SELECT count(*) FROM sqlite_master WHERE name LIKE 'process_run%'`).Scan(&tables); err != nil || tables != 0 {
		t.Fatalf("the version-8 file has %d run tables, %v", tables, err)
	}
	db.Close()

	s := openMigrated(t, path)
	ctx := context.Background()
	exited := old
	exited.Exit, exited.ExitCode = old.Start.Add(time.Second), ptr(0) // runnable now
	fresh := process("new", "s", 2)
	fresh.Attribution, fresh.Exit, fresh.ExitCode = vocab.AttributionInherited, fresh.Start.Add(time.Second), ptr(2)
	mustUpsert(t, s, []join.Session{session("s", "alice", 0)}, []join.Process{exited, fresh})
	var rows, inRuns int
	if err := s.r.QueryRow(`SELECT (SELECT count(*) FROM processes), (SELECT coalesce(sum(n), 0) FROM process_runs)`).
		Scan(&rows, &inRuns); err != nil {
		t.Fatal(err)
	}
	if rows != 1 || inRuns != 1 {
		t.Fatalf("%d rows and %d run processes, want the old row and the new process's run", rows, inRuns)
	}
	got := allProcesses(t, s, store.ProcessFilter{AuditID: "s"})
	if len(got) != 2 || got[0].ProcessID != "new" || got[1].ProcessID != "old" || got[1].Exit.IsZero() || *got[0].ExitCode != 2 {
		t.Fatalf("processes of s after the upgrade: %+v", got)
	}
	d, err := s.GetSession(ctx, "s")
	if err != nil || d.ProcessCount != 2 || len(d.Processes) != 2 {
		t.Fatalf("session s: %d processes, count %d, %v", len(d.Processes), d.ProcessCount, err)
	}
}
