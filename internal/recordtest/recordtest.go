// Package recordtest builds the plain session and process records that
// tests of the alert rules and their delivery start from.
package recordtest

import (
	"time"

	"github.com/execid/correlator/pkg/auditlog"
	"github.com/execid/correlator/pkg/capture"
	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/vocab"
)

// T0 is the fixtures' clock.
var T0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// SessionID is Session's audit ID.
const SessionID = "5b5e2e4c-0000-4000-8000-000000000001"

// Session returns a plain, unremarkable exec session.
func Session() *join.Session {
	return &join.Session{ExecRecord: auditlog.ExecRecord{
		AuditID:   SessionID,
		User:      auditlog.UserInfo{Username: "alice@example.com", Groups: []string{"system:authenticated", "dev"}},
		Namespace: "shop",
		Pod:       "web-0",
		Container: "app",
		Command:   []string{"ls", "-l"},
		Verb:      "create",
		Code:      101,
	}}
}

// Process returns a process attributed to Session().
func Process() *join.Process {
	return &join.Process{
		Exec: capture.Exec{
			ProcessID: "1234-1700000000000000000",
			PID:       1234,
			PPID:      1,
			Filename:  "/bin/ls",
			Argv:      []string{"ls", "-l"},
		},
		Namespace:   "shop",
		Pod:         "web-0",
		Container:   "app",
		Start:       T0,
		AuditID:     SessionID,
		Attribution: vocab.AttributionAuditID,
		Source:      vocab.SourceEnv,
	}
}

// Claimant is Process() carrying Session()'s ID without being attributed
// to it: what a forged root looks like after the join.
func Claimant() *join.Process {
	p := Process()
	p.AuditID, p.ClaimedAuditID, p.Attribution = "", SessionID, vocab.AttributionNone
	p.ContainerID = "e9ca6c735a09"
	return p
}
