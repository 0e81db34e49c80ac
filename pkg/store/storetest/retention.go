package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/store"
)

func testRetention(t *testing.T, s store.Backend) {
	ctx := context.Background()
	oldEnded := session("old-ended", "alice", 0)   // ended at 30, no process: goes
	oldBusy := session("old-busy", "alice", 1)     // ended at 31, a running process: stays
	oldOpen := session("old-open", "alice", 2)     // never ended, received at 2: goes
	oldExited := session("old-exited", "alice", 3) // its only process exited at 50: both go
	recent := session("recent", "alice", 500)
	oldOpen.EndTimestamp = time.Time{}
	running := process("running", "old-busy", 5)
	exited := process("exited", "old-exited", 6)
	exited.Exit = at(50)
	late := process("late-exit", "recent", 510)
	late.Exit = at(520)
	rec := func(id string, sec int) store.AuditRecord {
		return store.AuditRecord{AuditID: id, Stage: "ResponseComplete", StageTimestamp: at(sec), Event: []byte(`{}`)}
	}
	write(t, s, store.Batch{
		Sessions:     []join.Session{oldEnded, oldBusy, oldOpen, oldExited, recent},
		Processes:    []join.Process{running, exited, late},
		AuditRecords: []store.AuditRecord{rec("old-ended", 30), rec("old-busy", 31), rec("orphan", 40), rec("new-orphan", 400), rec("recent", 530)},
		Alerts:       []store.Alert{alert("old", "r", 10), alert("new", "r", 600)},
	})
	d, err := s.DeleteOlderThan(ctx, at(100))
	if err != nil {
		t.Fatalf("DeleteOlderThan: %v", err)
	}
	sameJSON(t, "deleted counts", d, store.Deleted{Sessions: 3, Processes: 1, AuditRecords: 2, Alerts: 1})
	sameIDs(t, "sessions left", allSessions(t, s, store.SessionFilter{}), []string{"recent", "old-busy"})
	sameIDs(t, "processes left", allProcesses(t, s, store.ProcessFilter{}), []string{"late-exit", "running"})
	sameIDs(t, "alerts left", allAlerts(t, s, store.AlertFilter{}), []string{"new"})
	if det, err := s.GetSession(ctx, "old-busy"); err != nil || len(det.AuditRecords) != 1 {
		t.Fatalf("kept session lost its audit record: %+v, %v", det.AuditRecords, err)
	}
	again, err := s.DeleteOlderThan(ctx, at(100))
	if err != nil || again != (store.Deleted{}) {
		t.Fatalf("second pass = %+v, %v", again, err)
	}
}
