package store

import (
	"time"

	"github.com/execid/correlator/pkg/auditlog"
	"github.com/execid/correlator/pkg/capture"
	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/vocab"
)

// base is the fixtures' reference time.
var base = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// session returns a session of user received at base+minutes.
func session(id, user string, minutes int) join.Session {
	return join.Session{ExecRecord: auditlog.ExecRecord{
		AuditID:                  id,
		User:                     auditlog.UserInfo{Username: user},
		Verb:                     "create",
		Subresource:              "exec",
		RequestReceivedTimestamp: base.Add(time.Duration(minutes) * time.Minute),
		Stages:                   []string{auditlog.StageRequestReceived},
	}}
}

// process returns a process of session auditID started at base+seconds.
func process(id, auditID string, seconds int) join.Process {
	return join.Process{
		Exec:        capture.Exec{ProcessID: id, PID: 100, Filename: "/bin/sh"},
		Start:       base.Add(time.Duration(seconds) * time.Second),
		AuditID:     auditID,
		Attribution: vocab.AttributionAuditID,
	}
}
