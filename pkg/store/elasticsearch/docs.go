package elasticsearch

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/execid/correlator/pkg/auditlog"
	"github.com/execid/correlator/pkg/capture"
	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/store"
	"github.com/execid/correlator/pkg/vocab"
)

// Documents use ECS field names where ECS has one and keep the rest under
// correlator.*. Fields that must come back exactly (source IPs in order,
// the impersonated user, raw JSON) are kept there too.

type ecsEvent struct {
	Kind     string   `json:"kind"`
	Category []string `json:"category,omitempty"`
	Type     []string `json:"type,omitempty"`
	Action   string   `json:"action,omitempty"`
	Dataset  string   `json:"dataset"`
	ID       string   `json:"id,omitempty"`
	Start    string   `json:"start,omitempty"`
	End      string   `json:"end,omitempty"`
	Severity int      `json:"severity,omitempty"`
}

type ecsGroup struct {
	Name []string `json:"name,omitempty"`
}

type ecsUser struct {
	Name      string    `json:"name,omitempty"`
	ID        string    `json:"id,omitempty"`
	Group     *ecsGroup `json:"group,omitempty"`
	Effective *ecsUser  `json:"effective,omitempty"`
}

type ecsOrchestrator struct {
	Type      string `json:"type"`
	Namespace string `json:"namespace,omitempty"`
	Resource  struct {
		Name string `json:"name,omitempty"`
		Type string `json:"type"`
		ID   string `json:"id,omitempty"`
	} `json:"resource"`
}

type ecsContainer struct {
	ID   string `json:"id,omitempty"`
	Name string `json:"name,omitempty"`
}

// ecsOriginal is a field set of one original value: user_agent, url.
type ecsOriginal struct {
	Original string `json:"original"`
}

type sessionDoc struct {
	Timestamp string   `json:"@timestamp"`
	Event     ecsEvent `json:"event"`
	User      ecsUser  `json:"user"`
	Source    *struct {
		IP []string `json:"ip,omitempty"`
	} `json:"source,omitempty"`
	UserAgent    *ecsOriginal    `json:"user_agent,omitempty"`
	Orchestrator ecsOrchestrator `json:"orchestrator"`
	Container    *ecsContainer   `json:"container,omitempty"`
	Process      *struct {
		Args        []string `json:"args,omitempty"`
		CommandLine string   `json:"command_line,omitempty"`
	} `json:"process,omitempty"`
	HTTP *struct {
		Response struct {
			StatusCode int32 `json:"status_code"`
		} `json:"response"`
	} `json:"http,omitempty"`
	URL        *ecsOriginal `json:"url,omitempty"`
	Correlator struct {
		AuditID      string                `json:"audit_id"`
		Users        []string              `json:"users,omitempty"`
		Groups       []string              `json:"groups,omitempty"`
		Verb         string                `json:"verb,omitempty"`
		Subresource  string                `json:"subresource,omitempty"`
		Decision     string                `json:"decision,omitempty"`
		Reason       string                `json:"reason,omitempty"`
		Stages       []string              `json:"stages,omitempty"`
		Flags        []string              `json:"flags,omitempty"`
		Env          []string              `json:"env,omitempty"`
		Stdin        *bool                 `json:"stdin,omitempty"`
		TTY          *bool                 `json:"tty,omitempty"`
		UpdatedAt    string                `json:"updated_at"`
		SourceIPs    []string              `json:"source_ips,omitempty"`
		UserExtra    map[string][]string   `json:"user_extra,omitempty"`
		Impersonated *auditlog.UserInfo    `json:"impersonated,omitempty"`
		Ports        []string              `json:"ports,omitempty"`
		Annotations  map[string]string     `json:"annotations,omitempty"`
		SPORequest   string                `json:"spo_exec_request_uid,omitempty"`
		Conflicts    []auditlog.ExecRecord `json:"conflicts,omitempty"`
	} `json:"correlator"`
}

// ts writes a time as RFC 3339 with nanoseconds; the zero time is the
// epoch, as SQLite stores it as 0.
func ts(t time.Time) string {
	if t.IsZero() {
		t = time.Unix(0, 0)
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// optTS writes a time whose zero means "not yet" (a session not seen to
// end, a process still running) as an absent field.
func optTS(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return ts(t)
}

func parseTS(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("parsing time %q: %w", s, err)
	}
	if t.UnixNano() == 0 {
		return time.Time{}, nil
	}
	return t.UTC(), nil
}

func sessionToDoc(ss *join.Session, now time.Time) sessionDoc {
	var d sessionDoc
	d.Timestamp = ts(ss.RequestReceivedTimestamp)
	d.Event = ecsEvent{Kind: "event", Category: []string{"session"}, Type: []string{"start"},
		Action: ss.Subresource, Dataset: "correlator.sessions", Start: d.Timestamp, End: optTS(ss.EndTimestamp)}
	d.User = ecsUser{Name: ss.User.Username, ID: ss.User.UID}
	if len(ss.User.Groups) > 0 {
		d.User.Group = &ecsGroup{Name: ss.User.Groups}
	}
	users, groups := []string{}, ss.User.Groups
	if ss.User.Username != "" {
		users = append(users, ss.User.Username)
	}
	if imp := ss.ImpersonatedUser; imp != nil {
		d.User.Effective = &ecsUser{Name: imp.Username, ID: imp.UID}
		if len(imp.Groups) > 0 {
			d.User.Effective.Group = &ecsGroup{Name: imp.Groups}
		}
		if imp.Username != "" {
			users = append(users, imp.Username)
		}
		groups = append(groups[:len(groups):len(groups)], imp.Groups...)
		d.Correlator.Impersonated = imp
	}
	if len(ss.SourceIPs) > 0 {
		d.Source = &struct {
			IP []string `json:"ip,omitempty"`
		}{IP: ss.SourceIPs}
	}
	if ss.UserAgent != "" {
		d.UserAgent = &ecsOriginal{Original: ss.UserAgent}
	}
	d.Orchestrator.Type, d.Orchestrator.Namespace = "kubernetes", ss.Namespace
	d.Orchestrator.Resource.Name, d.Orchestrator.Resource.Type = ss.Pod, "pod"
	if ss.Container != "" {
		d.Container = &ecsContainer{Name: ss.Container}
	}
	if len(ss.Command) > 0 {
		d.Process = &struct {
			Args        []string `json:"args,omitempty"`
			CommandLine string   `json:"command_line,omitempty"`
		}{Args: ss.Command, CommandLine: strings.Join(ss.Command, " ")}
	}
	if ss.Code != 0 {
		d.HTTP = &struct {
			Response struct {
				StatusCode int32 `json:"status_code"`
			} `json:"response"`
		}{}
		d.HTTP.Response.StatusCode = ss.Code
	}
	if ss.RequestURI != "" {
		d.URL = &ecsOriginal{Original: ss.RequestURI}
	}
	c := &d.Correlator
	c.AuditID, c.Users, c.Groups = ss.AuditID, users, groups
	c.Verb, c.Subresource, c.Decision, c.Reason = ss.Verb, ss.Subresource, ss.Decision, ss.Reason
	c.Stages, c.Flags, c.Env, c.Stdin, c.TTY = ss.Stages, ss.Flags, ss.Env, ss.Stdin, ss.TTY
	updated := ss.UpdatedAt
	if updated.IsZero() {
		updated = now
	}
	c.UpdatedAt = ts(updated)
	c.SourceIPs, c.UserExtra = ss.SourceIPs, ss.User.Extra
	c.Ports, c.Annotations, c.SPORequest, c.Conflicts = ss.Ports, ss.Annotations, ss.SPOExecRequestUID, ss.Conflicts
	return d
}

func sessionFromDoc(d *sessionDoc) (join.Session, error) {
	c := &d.Correlator
	ss := join.Session{ExecRecord: auditlog.ExecRecord{
		AuditID: c.AuditID, User: auditlog.UserInfo{Username: d.User.Name, UID: d.User.ID, Extra: c.UserExtra},
		ImpersonatedUser: c.Impersonated, SourceIPs: c.SourceIPs, Namespace: d.Orchestrator.Namespace,
		Pod: d.Orchestrator.Resource.Name, Env: c.Env, Ports: c.Ports, Stdin: c.Stdin, TTY: c.TTY, Verb: c.Verb,
		Subresource: c.Subresource, Decision: c.Decision, Reason: c.Reason, Stages: c.Stages, Flags: c.Flags,
		Annotations: c.Annotations,
	}, SPOExecRequestUID: c.SPORequest, Conflicts: c.Conflicts}
	if d.User.Group != nil {
		ss.User.Groups = d.User.Group.Name
	}
	if d.URL != nil {
		ss.RequestURI = d.URL.Original
	}
	if d.UserAgent != nil {
		ss.UserAgent = d.UserAgent.Original
	}
	if d.Container != nil {
		ss.Container = d.Container.Name
	}
	if d.Process != nil {
		ss.Command = d.Process.Args
	}
	if d.HTTP != nil {
		ss.Code = d.HTTP.Response.StatusCode
	}
	var err error
	if ss.RequestReceivedTimestamp, err = parseTS(d.Timestamp); err != nil {
		return ss, err
	}
	if ss.EndTimestamp, err = parseTS(d.Event.End); err != nil {
		return ss, err
	}
	if ss.UpdatedAt, err = parseTS(c.UpdatedAt); err != nil {
		return ss, err
	}
	store.FillSession(&ss) // documents omit empty lists
	return ss, nil
}

type processDoc struct {
	Timestamp string   `json:"@timestamp"`
	Event     ecsEvent `json:"event"`
	Process   struct {
		EntityID    string   `json:"entity_id"`
		PID         uint32   `json:"pid"`
		Executable  string   `json:"executable,omitempty"`
		Args        []string `json:"args,omitempty"`
		CommandLine string   `json:"command_line,omitempty"`
		Start       string   `json:"start"`
		End         string   `json:"end,omitempty"`
		ExitCode    *int     `json:"exit_code,omitempty"`
		Parent      struct {
			PID      uint32 `json:"pid"`
			EntityID string `json:"entity_id,omitempty"`
		} `json:"parent"`
		User struct {
			ID string `json:"id"`
		} `json:"user"`
	} `json:"process"`
	Container    *ecsContainer   `json:"container,omitempty"`
	Orchestrator ecsOrchestrator `json:"orchestrator"`
	Correlator   struct {
		AuditID        string            `json:"audit_id,omitempty"`
		ClaimedAuditID string            `json:"claimed_audit_id,omitempty"`
		Attribution    vocab.Attribution `json:"attribution,omitempty"`
		Confidence     float64           `json:"confidence,omitempty"`
		Candidates     []string          `json:"candidates,omitempty"`
		Source         vocab.Source      `json:"source,omitempty"`
		Flags          []string          `json:"flags,omitempty"`
		SessionRootID  string            `json:"session_root_id,omitempty"`
		ExecTime       string            `json:"exec_time,omitempty"`
		ArgvTruncated  bool              `json:"argv_truncated,omitempty"`
		SPORequest     string            `json:"spo_exec_request_uid,omitempty"`
		RecordDelay    float64           `json:"record_delay_seconds,omitempty"`
		// PendingUntil: until when the answer may still change, while
		// the process waits (join.Process.PendingUntil).
		PendingUntil string           `json:"pending_until,omitempty"`
		Evidence     *processEvidence `json:"evidence,omitempty"`
	} `json:"correlator"`
}

// processEvidence is the joiner's input evidence of a process, which the
// API never serves (join.Process's `json:"-"` fields): kept, unindexed,
// so that an agent can hand a process the joiner forgot (a restart) to
// it again. Each member is left out when zero, and the object when all
// are.
type processEvidence struct {
	Captured   *capture.KeyValue `json:"captured,omitempty"`
	SPO        *capture.KeyValue `json:"spo,omitempty"`
	Bridge     *capture.KeyValue `json:"bridge,omitempty"`
	ExecOrigin capture.Origin    `json:"exec_origin,omitempty"`
}

// evidenceOf is p's evidence, nil when it has none.
func evidenceOf(p *join.Process) *processEvidence {
	kv := func(v *capture.KeyValue) *capture.KeyValue {
		if v.Value == "" && v.Claimed == "" && v.Source == "" && len(v.Flags) == 0 {
			return nil
		}
		return v
	}
	e := processEvidence{Captured: kv(&p.Captured), SPO: kv(&p.SPO), Bridge: kv(&p.Bridge), ExecOrigin: p.ExecOrigin}
	if e == (processEvidence{}) {
		return nil
	}
	return &e
}

// set sets p's evidence, zero until then, from e; none (nil: a document
// written before the evidence was) leaves it zero.
func (e *processEvidence) set(p *join.Process) {
	if e == nil {
		return
	}
	for _, m := range [...]struct{ dst, src *capture.KeyValue }{{&p.Captured, e.Captured}, {&p.SPO, e.SPO}, {&p.Bridge, e.Bridge}} {
		if m.src != nil {
			*m.dst = *m.src
		}
	}
	p.ExecOrigin = e.ExecOrigin
}

func processToDoc(p *join.Process) processDoc {
	var d processDoc
	d.Timestamp = ts(p.Start)
	typ := "start"
	if !p.Exit.IsZero() {
		typ = "end"
	}
	d.Event = ecsEvent{Kind: "event", Category: []string{"process"}, Type: []string{typ}, Dataset: "correlator.processes"}
	pr := &d.Process
	pr.EntityID, pr.PID, pr.Executable, pr.Args = p.ProcessID, p.PID, p.Filename, p.Argv
	if len(p.Argv) > 0 {
		pr.CommandLine = strings.Join(p.Argv, " ")
	}
	pr.Start, pr.End, pr.ExitCode = d.Timestamp, optTS(p.Exit), p.ExitCode
	pr.Parent.PID, pr.Parent.EntityID = p.PPID, p.ParentProcessID
	pr.User.ID = strconv.FormatUint(uint64(p.UID), 10)
	if p.ContainerID != "" || p.Container != "" {
		d.Container = &ecsContainer{ID: p.ContainerID, Name: p.Container}
	}
	d.Orchestrator.Type, d.Orchestrator.Namespace = "kubernetes", p.Namespace
	d.Orchestrator.Resource.Name, d.Orchestrator.Resource.Type, d.Orchestrator.Resource.ID = p.Pod, "pod", p.PodUID
	c := &d.Correlator
	c.AuditID, c.ClaimedAuditID, c.Attribution, c.Confidence = p.AuditID, p.ClaimedAuditID, p.Attribution, p.Confidence
	c.Candidates, c.Source, c.Flags, c.SessionRootID = p.Candidates, p.Source, p.Flags, p.SessionRootID
	c.ExecTime, c.ArgvTruncated, c.SPORequest = optTS(p.ExecTime), p.ArgvTruncated, p.SPOExecRequestUID
	c.RecordDelay, c.PendingUntil, c.Evidence = p.RecordDelay, optTS(p.PendingUntil), evidenceOf(p)
	return d
}

func processFromDoc(d *processDoc) (join.Process, error) {
	pr, c := &d.Process, &d.Correlator
	p := join.Process{
		Exec: capture.Exec{
			ProcessID: pr.EntityID, ParentProcessID: pr.Parent.EntityID, PID: pr.PID, PPID: pr.Parent.PID,
			Filename: pr.Executable, Argv: pr.Args, ArgvTruncated: c.ArgvTruncated,
			PodUID: d.Orchestrator.Resource.ID, SessionRootID: c.SessionRootID,
		},
		Namespace: d.Orchestrator.Namespace, Pod: d.Orchestrator.Resource.Name, ExitCode: pr.ExitCode,
		AuditID: c.AuditID, ClaimedAuditID: c.ClaimedAuditID, SPOExecRequestUID: c.SPORequest,
		Attribution: c.Attribution, Confidence: c.Confidence, Candidates: c.Candidates, Source: c.Source,
		Flags: c.Flags, RecordDelay: c.RecordDelay,
	}
	c.Evidence.set(&p)
	if d.Container != nil {
		p.ContainerID, p.Container = d.Container.ID, d.Container.Name
	}
	uid, err := strconv.ParseUint(pr.User.ID, 10, 32)
	if err != nil {
		return p, fmt.Errorf("reading process %s uid %q: %w", p.ProcessID, pr.User.ID, err)
	}
	p.UID = uint32(uid)
	if p.Start, err = parseTS(d.Timestamp); err != nil {
		return p, err
	}
	if p.ExecTime, err = parseTS(c.ExecTime); err != nil {
		return p, err
	}
	if p.Exit, err = parseTS(pr.End); err != nil {
		return p, err
	}
	if p.PendingUntil, err = parseTS(c.PendingUntil); err != nil {
		return p, err
	}
	store.FillProcess(&p) // documents omit empty lists
	return p, nil
}
