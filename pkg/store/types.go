package store

import (
	"encoding/json"
	"time"
)

// Attribution values: how a process was tied to a session.
const (
	AttributionAuditID   = "audit_id"
	AttributionInherited = "inherited"
	AttributionHeuristic = "heuristic"
	AttributionAmbiguous = "ambiguous"
)

// Session is one exec (or attach) request, keyed by its audit ID, with the
// user context from the audit record. FirstProcess, LastProcess and
// ProcessCount are computed by the store from the processes attributed to
// the session; values a caller sets there are ignored.
type Session struct {
	AuditID          string              `json:"auditID"`
	Username         string              `json:"username"`
	UID              string              `json:"uid,omitempty"`
	Groups           []string            `json:"groups,omitempty"`
	Extra            map[string][]string `json:"extra,omitempty"`
	ImpersonatedUser *UserInfo           `json:"impersonatedUser,omitempty"`
	SourceIPs        []string            `json:"sourceIPs,omitempty"`
	UserAgent        string              `json:"userAgent,omitempty"`
	Namespace        string              `json:"namespace"`
	Pod              string              `json:"pod"`
	Container        string              `json:"container,omitempty"`
	Command          []string            `json:"command,omitempty"`
	// Env is the caller's KEP-6035 `kubectl exec --env` list (NAME=value);
	// Stdin and TTY are the request's streaming options.
	Env             []string   `json:"env,omitempty"`
	Stdin           bool       `json:"stdin,omitempty"`
	TTY             bool       `json:"tty,omitempty"`
	Verb            string     `json:"verb,omitempty"`
	Subresource     string     `json:"subresource,omitempty"`
	Code            int        `json:"code,omitempty"`
	Decision        string     `json:"decision,omitempty"`
	Reason          string     `json:"reason,omitempty"`
	RequestReceived time.Time  `json:"requestReceived"`
	End             *time.Time `json:"end,omitempty"`
	Stages          []string   `json:"stages,omitempty"`
	Flags           []string   `json:"flags,omitempty"`
	FirstProcess    time.Time  `json:"firstProcess,omitzero"`
	LastProcess     time.Time  `json:"lastProcess,omitzero"`
	ProcessCount    int        `json:"processCount"`
	UpdatedAt       time.Time  `json:"updatedAt,omitzero"`
}

// UserInfo is an impersonated identity.
type UserInfo struct {
	Username string              `json:"username"`
	UID      string              `json:"uid,omitempty"`
	Groups   []string            `json:"groups,omitempty"`
	Extra    map[string][]string `json:"extra,omitempty"`
}

// Process is one exec'd process, keyed by its processID (tgid and start
// time), attributed to a session by AuditID.
type Process struct {
	ProcessID       string     `json:"processID"`
	ParentProcessID string     `json:"parentProcessID,omitempty"`
	PID             int        `json:"pid"`
	PPID            int        `json:"ppid"`
	UID             int        `json:"uid"`
	Filename        string     `json:"filename"`
	Argv            []string   `json:"argv,omitempty"`
	ContainerID     string     `json:"containerID,omitempty"`
	PodUID          string     `json:"podUID,omitempty"`
	Namespace       string     `json:"namespace,omitempty"`
	Pod             string     `json:"pod,omitempty"`
	Container       string     `json:"container,omitempty"`
	Start           time.Time  `json:"start"`
	Exit            *time.Time `json:"exit,omitempty"`
	ExitCode        *int       `json:"exitCode,omitempty"`
	// AuditID is the session the process is attributed to; empty when it
	// is not attributed.
	AuditID string `json:"auditID,omitempty"`
	// ClaimedAuditID is an ID the process carried that is not its
	// attribution: the env value of an env_mismatch, or the captured ID of
	// a process the join refused (root_unverified, denied_exec,
	// pod_mismatch) or could not match (pending, no_audit_record).
	ClaimedAuditID string   `json:"claimedAuditID,omitempty"`
	Attribution    string   `json:"attribution"`
	Confidence     float64  `json:"confidence,omitempty"`
	Candidates     []string `json:"candidates,omitempty"`
	Source         string   `json:"source,omitempty"`
	Flags          []string `json:"flags,omitempty"`
	SessionRootID  string   `json:"sessionRootID,omitempty"`
}

// AuditRecord is one stage of an audit event, kept verbatim so that the
// session view can show the record it was built from.
type AuditRecord struct {
	AuditID        string          `json:"auditID"`
	Stage          string          `json:"stage"`
	StageTimestamp time.Time       `json:"stageTimestamp"`
	Event          json.RawMessage `json:"event"`
}

// Alert is one rule match. ID is the alert's dedupe key: inserting an ID
// that is already stored is a no-op.
type Alert struct {
	ID        string          `json:"id"`
	Time      time.Time       `json:"time"`
	Rule      string          `json:"rule"`
	Severity  string          `json:"severity"`
	Message   string          `json:"message"`
	AuditID   string          `json:"auditID,omitempty"`
	ProcessID string          `json:"processID,omitempty"`
	Payload   json.RawMessage `json:"payload,omitempty"`
}

// SessionDetail is a session with its audit record stages and the
// processes attributed to it, oldest first, for drawing the process tree.
type SessionDetail struct {
	Session
	AuditRecords []AuditRecord `json:"auditRecords,omitempty"`
	Processes    []Process     `json:"processes"`
	// Claimants are processes that carried this session's ID without being
	// attributed to it (ClaimedAuditID): forged roots, replays of a denied
	// ID, pod mismatches, env forgeries. Evidence, never the session's own.
	Claimants []Process `json:"claimants,omitempty"`
	// ProcessesTruncated is set when the session has more processes than
	// Config.SessionProcessLimit; Processes then holds the oldest ones.
	ProcessesTruncated bool `json:"processesTruncated,omitempty"`
}

// Batch is one unit of writing: everything in it commits in one
// transaction, or none of it does.
type Batch struct {
	Sessions     []Session
	Processes    []Process
	AuditRecords []AuditRecord
	Alerts       []Alert
}

// Len is the number of rows in the batch.
func (b Batch) Len() int {
	return len(b.Sessions) + len(b.Processes) + len(b.AuditRecords) + len(b.Alerts)
}

// SessionFilter selects sessions. Zero fields do not filter. User matches
// the authenticated or the impersonated username, Group either's groups.
// Since (inclusive) and Until (exclusive) bound RequestReceived. Command is
// a case-sensitive substring of the space-joined command.
type SessionFilter struct {
	User      string
	Group     string
	Namespace string
	Pod       string
	Container string
	Since     time.Time
	Until     time.Time
	Command   string
	Limit     int
	Cursor    string
}

// ProcessFilter selects processes. User and Group select through the
// process's session; Since and Until bound Start; Command is a
// case-sensitive substring of the space-joined argv.
type ProcessFilter struct {
	User        string
	Group       string
	Namespace   string
	Pod         string
	Container   string
	Since       time.Time
	Until       time.Time
	Command     string
	AuditID     string
	Attribution string
	Limit       int
	Cursor      string
}

// AlertFilter selects alerts; Since and Until bound Time.
type AlertFilter struct {
	Rule      string
	Severity  string
	AuditID   string
	ProcessID string
	Since     time.Time
	Until     time.Time
	Limit     int
	Cursor    string
}
