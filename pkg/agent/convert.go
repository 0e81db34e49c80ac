package agent

import (
	"encoding/json"
	"fmt"

	"github.com/execid/correlator/pkg/auditlog"
	"github.com/execid/correlator/pkg/capture"
	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/meta"
	"github.com/execid/correlator/pkg/store"
)

// spoKey is the Security Profiles Operator's exec request key.
const spoKey = "SPO_EXEC_REQUEST_UID"

// toJoinProcess converts a capture exec event, with pod metadata when known.
func toJoinProcess(ev capture.Event, info meta.Info) join.Process {
	p := join.Process{
		ProcessID: ev.ProcessID, ParentProcessID: ev.ParentProcessID,
		PID: ev.PID, PPID: ev.PPID, UID: ev.UID,
		Start: ev.Time, ExecTime: ev.Time,
		Filename: ev.Filename, Argv: ev.Argv, ArgvTruncated: ev.ArgvTruncated,
		ContainerID: ev.ContainerID, PodUID: ev.PodUID,
		Namespace: info.Namespace, Pod: info.Pod, Container: info.Container,
		AuditID: ev.AuditID, ClaimedAuditID: ev.ClaimedAuditID, Source: string(ev.Source),
		Flags: ev.Flags, SessionRootID: ev.SessionRootID,
	}
	if info.PodUID != "" && p.PodUID == "" {
		p.PodUID = info.PodUID
	}
	if kv, ok := ev.Keys[spoKey]; ok {
		p.SPO = join.KeyValue{Value: kv.Value, Claimed: kv.Claimed, Source: string(kv.Source), Flags: kv.Flags}
	}
	return p
}

func toJoinExit(ev capture.Event) join.Exit {
	code := 0
	if ev.ExitCode != nil {
		code = *ev.ExitCode
	}
	return join.Exit{ProcessID: ev.ProcessID, Time: ev.Time, Code: code}
}

func toStoreProcess(p *join.AttributedProcess) store.Process {
	out := store.Process{
		ProcessID: p.ProcessID, ParentProcessID: p.ParentProcessID,
		PID: int(p.PID), PPID: int(p.PPID), UID: int(p.UID),
		Filename: p.Filename, Argv: p.Argv, ContainerID: p.ContainerID, PodUID: p.PodUID,
		Namespace: p.Namespace, Pod: p.Pod, Container: p.Container,
		Start: p.Start, ExitCode: p.ExitCode,
		AuditID: p.AuditID, ClaimedAuditID: p.ClaimedAuditID,
		Attribution: string(p.Attribution), Confidence: p.Confidence, Candidates: p.Candidates,
		Source: p.Source, Flags: p.Flags, SessionRootID: p.SessionRootID,
	}
	if p.Attribution == join.AttributionNone {
		// Not attributed: the ID it carried is a claim, kept visible as
		// evidence, never a session membership (which would put a forged
		// root's commands under the victim's user).
		claim := p.CapturedAuditID
		if claim == "" {
			claim = p.AuditID
		}
		if claim != "" {
			out.ClaimedAuditID = claim
		}
		out.AuditID = ""
	}
	if !p.Exit.IsZero() {
		t := p.Exit
		out.Exit = &t
	}
	return out
}

func toStoreUser(u *auditlog.UserInfo) *store.UserInfo {
	if u == nil {
		return nil
	}
	return &store.UserInfo{Username: u.Username, UID: u.UID, Groups: u.Groups, Extra: u.Extra}
}

func toStoreSession(s *join.Session) store.Session {
	out := store.Session{
		AuditID: s.AuditID, Username: s.User.Username, UID: s.User.UID, Groups: s.User.Groups, Extra: s.User.Extra,
		ImpersonatedUser: toStoreUser(s.ImpersonatedUser), SourceIPs: s.SourceIPs, UserAgent: s.UserAgent,
		Namespace: s.Namespace, Pod: s.Pod, Container: s.Container, Command: s.Command,
		Env: s.Env, Stdin: s.Stdin, TTY: s.TTY, Verb: s.Verb, Subresource: s.Subresource, Code: int(s.Code), Decision: s.Decision, Reason: s.Reason,
		RequestReceived: s.RequestReceived, Stages: s.Stages, Flags: s.Flags,
	}
	if !s.End.IsZero() {
		t := s.End
		out.End = &t
	}
	return out
}

// AuditRecord keeps one exec stage as parsed (the decoder normalises every
// framing to the audit.k8s.io/v1 shape); `audit ship` indexes the same.
func AuditRecord(ev *auditlog.Event) (store.AuditRecord, error) {
	raw, err := json.Marshal(ev)
	if err != nil {
		return store.AuditRecord{}, fmt.Errorf("encoding audit stage %s/%s: %w", ev.AuditID, ev.Stage, err)
	}
	return store.AuditRecord{AuditID: ev.AuditID, Stage: ev.Stage, StageTimestamp: ev.StageTimestamp.Time, Event: raw}, nil
}

func (a *Agent) auditRecord(ev *auditlog.Event) store.AuditRecord {
	r, err := AuditRecord(ev)
	if err != nil {
		a.log.Warn().Err(err).Msg("keeping audit stage")
		r = store.AuditRecord{AuditID: ev.AuditID, Stage: ev.Stage, StageTimestamp: ev.StageTimestamp.Time}
	}
	return r
}
