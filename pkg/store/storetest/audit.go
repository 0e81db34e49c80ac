package storetest

import (
	"context"
	"fmt"
	"testing"

	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/store"
	"github.com/execid/correlator/pkg/vocab"
)

// auditEvent is a streaming exec audit event of one stage, as the agent
// stores it, for a request by user from ip received at second recv.
func auditEvent(id, stage, user, ip string, recv int) store.AuditRecord {
	ts := func(sec int) string { return at(sec).Format("2006-01-02T15:04:05.000000Z07:00") }
	ev := fmt.Sprintf(`{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":%q,"stage":%q,`+
		`"requestURI":"/api/v1/namespaces/prod/pods/web-0/exec?command=sh&container=app&stdin=true&tty=true",`+
		`"verb":"create","user":{"username":%q,"groups":["system:authenticated"]},"sourceIPs":[%q],`+
		`"objectRef":{"resource":"pods","namespace":"prod","name":"web-0","apiVersion":"v1","subresource":"exec"},`+
		`"requestReceivedTimestamp":%q,"stageTimestamp":%q}`, id, stage, user, ip, ts(recv), ts(recv+1))
	return store.AuditRecord{AuditID: id, Stage: stage, StageTimestamp: at(recv + 1), Event: []byte(ev)}
}

// testAuditIDReuse checks that a different request sent with a stored
// request's audit ID (an Audit-ID header copied from the victim's process
// environment) is kept beside the victim's record and never replaces it,
// while a redelivery of one request is still stored once.
func testAuditIDReuse(t *testing.T, s store.Backend) {
	ctx := context.Background()
	victim := auditEvent("shared", "ResponseStarted", "alice", "10.0.0.1", 0)
	write(t, s, store.Batch{Sessions: []join.Session{session("shared", "alice", 0)},
		AuditRecords: []store.AuditRecord{victim}})
	// Redelivered, in its own batch and twice in one batch.
	write(t, s, store.Batch{AuditRecords: []store.AuditRecord{victim}})
	write(t, s, store.Batch{AuditRecords: []store.AuditRecord{victim, victim}})
	d, err := s.GetSession(ctx, "shared")
	if err != nil {
		t.Fatalf("GetSession: %v", err)
	}
	sameJSON(t, "records after redelivery", d.AuditRecords, []store.AuditRecord{victim})

	intruder := auditEvent("shared", "ResponseStarted", "mallory", "10.0.0.66", 5)
	write(t, s, store.Batch{AuditRecords: []store.AuditRecord{intruder}})
	d, err = s.GetSession(ctx, "shared")
	if err != nil {
		t.Fatalf("GetSession: %v", err)
	}
	sameJSON(t, "records after a reused ID", d.AuditRecords, []store.AuditRecord{victim, intruder})

	// A later stage of the victim's request joins it; the intruder's
	// record stays.
	done := auditEvent("shared", "ResponseComplete", "alice", "10.0.0.1", 0)
	done.StageTimestamp = at(9)
	write(t, s, store.Batch{AuditRecords: []store.AuditRecord{done, victim}})
	d, err = s.GetSession(ctx, "shared")
	if err != nil {
		t.Fatalf("GetSession: %v", err)
	}
	sameJSON(t, "records after the last stage", d.AuditRecords, []store.AuditRecord{victim, intruder, done})
}

// testClaimants: a process that only claimed a session's ID is listed as a
// claimant, never counted or filtered by user as the session's own.
func testClaimants(t *testing.T, s store.Backend) {
	ctx := context.Background()
	own := process("own", "victim", 1)
	forged := process("forged", "", 2)
	forged.ClaimedAuditID, forged.Flags, forged.Attribution = "victim", []string{"root_unverified"}, ""
	write(t, s, store.Batch{Sessions: []join.Session{session("victim", "alice", 0)}, Processes: []join.Process{own, forged}})
	d, err := s.GetSession(ctx, "victim")
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Processes) != 1 || d.Processes[0].ProcessID != "own" || d.ProcessCount != 1 {
		t.Errorf("processes = %v (count %d), want only own", d.Processes, d.ProcessCount)
	}
	if len(d.Claimants) != 1 || d.Claimants[0].ProcessID != "forged" {
		t.Errorf("claimants = %v, want forged", d.Claimants)
	}
	sameIDs(t, "alice's processes", allProcesses(t, s, store.ProcessFilter{User: "alice"}), []string{"own"})
}

// testReusedIDSessions: two users' requests under one audit ID are two
// sessions (the second keyed <auditID>~<hash> by the joiner); each user
// filter returns only that user's processes, and an ambiguous process,
// which names no session, is neither user's: it is a claimant of the ID.
func testReusedIDSessions(t *testing.T, s store.Backend) {
	ctx := context.Background()
	const shared, second = "shared", "shared~0123456789ab"
	pa, pm, px := process("pa", shared, 1), process("pm", second, 2), process("px", "", 3)
	px.Attribution, px.ClaimedAuditID, px.Candidates = vocab.AttributionAmbiguous, shared, []string{shared, second}
	write(t, s, store.Batch{Sessions: []join.Session{session(shared, "alice", 0), session(second, "mallory", 1)},
		Processes: []join.Process{pa, pm, px}})
	sameIDs(t, "alice's processes", allProcesses(t, s, store.ProcessFilter{User: "alice"}), []string{"pa"})
	sameIDs(t, "mallory's processes", allProcesses(t, s, store.ProcessFilter{User: "mallory"}), []string{"pm"})
	d, err := s.GetSession(ctx, second)
	if err != nil {
		t.Fatal(err)
	}
	if d.User.Username != "mallory" || len(d.Processes) != 1 || d.Processes[0].ProcessID != "pm" {
		t.Errorf("session %s: user %q processes %v, want mallory's pm", second, d.User.Username, d.Processes)
	}
	if d, err = s.GetSession(ctx, shared); err != nil {
		t.Fatal(err)
	}
	if len(d.Claimants) != 1 || d.Claimants[0].ProcessID != "px" {
		t.Errorf("claimants of %s = %v, want the ambiguous px", shared, d.Claimants)
	}
}
