package join

import (
	"time"

	"github.com/execid/correlator/pkg/auditlog"
)

// Attribution says how a process was tied to an exec session.
type Attribution string

const (
	// AttributionNone: not attributed (pending, flagged, or not an exec session).
	AttributionNone Attribution = ""
	// AttributionAuditID: a verified session root carrying the session's ID.
	AttributionAuditID Attribution = "audit_id"
	// AttributionInherited: a descendant whose ID the kernel carried through fork.
	AttributionInherited Attribution = "inherited"
	// AttributionHeuristic: an ID-less exec root matched by pod, time and argv.
	AttributionHeuristic Attribution = "heuristic"
	// AttributionAmbiguous: several sessions fit; see Candidates.
	AttributionAmbiguous Attribution = "ambiguous"
)

// Sources of an ID, as pkg/capture reports them.
const (
	SourceEnv       = "env"
	SourceInherited = "inherited"
	SourceProcfs    = "procfs"
)

// Capture flags the joiner reads (the same strings pkg/capture emits).
const (
	FlagEnvMismatch    = "env_mismatch"
	FlagEnvRemoved     = "env_removed"
	FlagRootUnverified = "root_unverified"
	// FlagRootIndirect: the root's key was set by the first program the
	// runtime exec'd (SPO's env prefix), not by the runtime itself.
	FlagRootIndirect  = "root_indirect"
	FlagPlaceholder   = "placeholder"
	FlagNonstandardID = "nonstandard_id"
)

// Flags the joiner adds.
const (
	// FlagPodMismatch: the record names another namespace, pod or container
	// (an ID replayed elsewhere), or the ID ran in more than one container.
	FlagPodMismatch = "pod_mismatch"
	// FlagDeniedExec: the record was refused (401/403 or decision forbid), yet
	// processes carry its ID.
	FlagDeniedExec = "denied_exec"
	// FlagFailedExec: the record failed with another 4xx/5xx code, yet
	// processes carry its ID.
	FlagFailedExec = "failed_exec"
	// FlagNoAuditRecord: the ID was still unmatched after the pending TTL.
	FlagNoAuditRecord = "no_audit_record"
	// FlagAuditIDConflict: more than one request used the ID.
	FlagAuditIDConflict = auditlog.FlagAuditIDConflict
)

// PlaceholderID is the value KEP-6035 injects when the apiserver had no ID.
const PlaceholderID = "unknown"

// SPOKey is the env key the Security Profiles Operator's exec webhook injects.
const SPOKey = "SPO_EXEC_REQUEST_UID"

// KeyValue is what the kernel recorded for one secondary env key.
type KeyValue struct {
	Value   string   `json:"value,omitempty"`
	Claimed string   `json:"claimed,omitempty"`
	Source  string   `json:"source,omitempty"`
	Flags   []string `json:"flags,omitempty"`
}

// Process is one exec as the agent hands it to the joiner: a capture event
// plus the pod identity pkg/meta resolved (empty when unknown). From a
// capture.Event: AuditID/ClaimedAuditID/Source/Flags/SessionRootID as they
// are, SPO from Keys["SPO_EXEC_REQUEST_UID"], ExecTime from Time and Start
// from the boot time plus StartBootNs.
type Process struct {
	ProcessID       string `json:"processID"`
	ParentProcessID string `json:"parentProcessID,omitempty"`
	PID             uint32 `json:"pid"`
	PPID            uint32 `json:"ppid"`
	UID             uint32 `json:"uid"`
	// Start is when the process was forked; ExecTime when this image was
	// exec'd. The heuristic uses Start, falling back to ExecTime.
	Start         time.Time `json:"start,omitzero"`
	ExecTime      time.Time `json:"execTime,omitzero"`
	Filename      string    `json:"filename,omitempty"`
	Argv          []string  `json:"argv,omitempty"`
	ArgvTruncated bool      `json:"argvTruncated,omitempty"`
	ContainerID   string    `json:"containerID,omitempty"`
	PodUID        string    `json:"podUID,omitempty"`
	Namespace     string    `json:"namespace,omitempty"`
	Pod           string    `json:"pod,omitempty"`
	Container     string    `json:"container,omitempty"`
	// AuditID is the kernel's authoritative KUBERNETES_EXEC_AUDIT_ID value;
	// ClaimedAuditID what the environment said when it differed.
	AuditID        string `json:"auditID,omitempty"`
	ClaimedAuditID string `json:"claimedAuditID,omitempty"`
	Source         string `json:"source,omitempty"`
	// Flags are the capture flags of the audit ID key and the event.
	Flags []string `json:"flags,omitempty"`
	// SPO is the SPO_EXEC_REQUEST_UID key, with its own source and flags.
	SPO           KeyValue `json:"spo,omitzero"`
	SessionRootID string   `json:"sessionRootID,omitempty"`
}

// Exit is a process exit.
type Exit struct {
	ProcessID string    `json:"processID"`
	Time      time.Time `json:"time"`
	Code      int       `json:"code"`
}

// AttributedProcess is a process with its attribution, ready to upsert.
type AttributedProcess struct {
	ProcessID         string    `json:"processID"`
	ParentProcessID   string    `json:"parentProcessID,omitempty"`
	PID               uint32    `json:"pid"`
	PPID              uint32    `json:"ppid"`
	UID               uint32    `json:"uid"`
	Start             time.Time `json:"start,omitzero"`
	ExecTime          time.Time `json:"execTime,omitzero"`
	Filename          string    `json:"filename,omitempty"`
	Argv              []string  `json:"argv,omitempty"`
	ArgvTruncated     bool      `json:"argvTruncated,omitempty"`
	ContainerID       string    `json:"containerID,omitempty"`
	PodUID            string    `json:"podUID,omitempty"`
	Namespace         string    `json:"namespace,omitempty"`
	Pod               string    `json:"pod,omitempty"`
	Container         string    `json:"container,omitempty"`
	CapturedAuditID   string    `json:"capturedAuditID,omitempty"`
	ClaimedAuditID    string    `json:"claimedAuditID,omitempty"`
	SPOExecRequestUID string    `json:"spoExecRequestUID,omitempty"`
	Source            string    `json:"source,omitempty"`
	SessionRootID     string    `json:"sessionRootID,omitempty"`

	Attribution Attribution `json:"attribution"`
	// AuditID is the session the process is attributed to, or for a flagged
	// process the session its ID names.
	AuditID    string   `json:"auditID,omitempty"`
	Confidence float64  `json:"confidence,omitempty"`
	Candidates []string `json:"candidates,omitempty"`
	Flags      []string `json:"flags"`

	Exit     time.Time `json:"exit,omitzero"`
	ExitCode *int      `json:"exitCode,omitempty"`
}

// RequestSummary names another request that reused a session's audit ID.
type RequestSummary struct {
	User             auditlog.UserInfo  `json:"user"`
	ImpersonatedUser *auditlog.UserInfo `json:"impersonatedUser,omitempty"`
	Namespace        string             `json:"namespace"`
	Pod              string             `json:"pod"`
	Container        string             `json:"container,omitempty"`
	Command          []string           `json:"command,omitempty"`
	Code             int32              `json:"code,omitempty"`
	RequestReceived  time.Time          `json:"requestReceived,omitzero"`
}

// Session is one exec request with its user context, ready to upsert.
type Session struct {
	AuditID          string             `json:"auditID"`
	Verb             string             `json:"verb"`
	Subresource      string             `json:"subresource"`
	User             auditlog.UserInfo  `json:"user"`
	ImpersonatedUser *auditlog.UserInfo `json:"impersonatedUser,omitempty"`
	SourceIPs        []string           `json:"sourceIPs,omitempty"`
	UserAgent        string             `json:"userAgent,omitempty"`
	Namespace        string             `json:"namespace"`
	Pod              string             `json:"pod"`
	Container        string             `json:"container,omitempty"`
	Command          []string           `json:"command,omitempty"`
	// Env is the caller's KEP-6035 `--env NAME=value` list.
	Env             []string          `json:"env,omitempty"`
	Stdin           bool              `json:"stdin"`
	TTY             bool              `json:"tty"`
	Code            int32             `json:"code,omitempty"`
	Decision        string            `json:"decision,omitempty"`
	Reason          string            `json:"reason,omitempty"`
	RequestURI      string            `json:"requestURI"`
	RequestReceived time.Time         `json:"requestReceived,omitzero"`
	End             time.Time         `json:"end,omitzero"`
	Stages          []string          `json:"stages"`
	Annotations     map[string]string `json:"annotations,omitempty"`
	// SPOExecRequestUID is the SPO webhook's annotation value, if any.
	SPOExecRequestUID string   `json:"spoExecRequestUID,omitempty"`
	Flags             []string `json:"flags"`
	// Conflicts lists the other requests that used this ID.
	Conflicts []RequestSummary `json:"conflicts,omitempty"`

	// ProcessCount counts processes attributed (audit_id, inherited or
	// heuristic) to the session; First/LastProcess bound their start times.
	// They cover what the joiner saw while it held the record: if an idle
	// record was dropped and comes back, they restart, so a store should
	// keep the larger count.
	ProcessCount int       `json:"processCount"`
	FirstProcess time.Time `json:"firstProcess,omitzero"`
	LastProcess  time.Time `json:"lastProcess,omitzero"`
}

// Update is one row for the store to upsert: exactly one field is set.
type Update struct {
	Process *AttributedProcess `json:"process,omitempty"`
	Session *Session           `json:"session,omitempty"`
}

// Stats counts what the joiner did and holds. Counters are monotonic.
type Stats struct {
	Processes int `json:"processes"` // in the process table now
	Pending   int `json:"pending"`   // waiting for a record now
	Records   int `json:"records"`   // records held now
	// Estimated heap held now, and refused records held now.
	RecordBytes   int `json:"recordBytes"`
	ProcessBytes  int `json:"processBytes"`
	DeniedRecords int `json:"deniedRecords"`

	ProcessesAdded int64 `json:"processesAdded"`
	ExitsAdded     int64 `json:"exitsAdded"`
	RecordsAdded   int64 `json:"recordsAdded"`
	StaleRecords   int64 `json:"staleRecords"` // older stage snapshots ignored
	Expired        int64 `json:"expired"`      // pending processes that hit the TTL

	EvictedProcesses int64 `json:"evictedProcesses"` // dropped by MaxProcesses or MaxProcessBytes
	EvictedPending   int64 `json:"evictedPending"`   // expired early by MaxPending
	EvictedRecords   int64 `json:"evictedRecords"`   // dropped by MaxRecords or MaxRecordBytes
	EvictedDenied    int64 `json:"evictedDenied"`    // refused records dropped by any record bound
	EvictedExits     int64 `json:"evictedExits"`     // exits for unknown processes dropped
}
