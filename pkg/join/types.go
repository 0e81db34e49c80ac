package join

import (
	"time"

	"github.com/execid/correlator/pkg/auditlog"
	"github.com/execid/correlator/pkg/capture"
	"github.com/execid/correlator/pkg/vocab"
)

// Process is one exec'd process, the one record of it from the joiner on:
// the image the kernel reported (capture.Exec, as it is), the pod pkg/meta
// resolved, the evidence the kernel captured for the keys, and the joiner's
// outcome. The agent fills the inputs; the joiner's updates carry the
// outcome; the stores keep and the API serves it.
type Process struct {
	capture.Exec
	Namespace string `json:"namespace,omitempty"`
	Pod       string `json:"pod,omitempty"`
	Container string `json:"container,omitempty"`
	// Start is when the process was forked; ExecTime when this image was
	// exec'd. The heuristic uses Start, falling back to ExecTime.
	Start    time.Time `json:"start,omitzero"`
	ExecTime time.Time `json:"execTime,omitzero"`

	// Captured is what the kernel recorded for the audit ID key, SPO for
	// the SPO key: the joiner's input, never served as they are (the
	// outcome says what they mean).
	Captured capture.KeyValue `json:"-"`
	SPO      capture.KeyValue `json:"-"`
	// Bridge is what the kernel recorded for the exec bridge's key
	// (vocab.BridgeKey): a root's value from the `env KEY=<id>` argv the
	// bridge wrote, joined through the request's audit annotation.
	Bridge capture.KeyValue `json:"-"`
	// ExecOrigin is who exec'd the image (capture.Event's): the join
	// tells a debug container's init from an exec by it.
	ExecOrigin capture.Origin `json:"-"`

	// Attribution is how the joiner tied the process to AuditID's session.
	Attribution vocab.Attribution `json:"attribution"`
	// AuditID is the session the process is attributed to; empty when it
	// is not attributed.
	AuditID string `json:"auditID,omitempty"`
	// ClaimedAuditID is an ID the process carried that is not its
	// attribution: the env value of an env_mismatch, or the captured ID of
	// a process the join refused (root_unverified, denied_exec,
	// pod_mismatch) or could not match (pending, no_audit_record).
	ClaimedAuditID    string       `json:"claimedAuditID,omitempty"`
	SPOExecRequestUID string       `json:"spoExecRequestUID,omitempty"`
	Source            vocab.Source `json:"source,omitempty"`
	Confidence        float64      `json:"confidence,omitempty"`
	Candidates        []string     `json:"candidates,omitempty"`
	// Flags are the capture flags of both keys and the joiner's own.
	Flags []string `json:"flags"`
	// RecordDelay is set with the flag late_audit_record: seconds from the
	// process's start to when the record that attributed it reached the
	// joiner, after the process's wait had ended. Zero when it came in time.
	RecordDelay float64 `json:"recordDelaySeconds,omitempty"`

	Exit     time.Time `json:"exit,omitzero"`
	ExitCode *int      `json:"exitCode,omitempty"`

	// Pending: the joiner's answer may still change without the process
	// changing: it waits for a record (or, an ID-less root, for its
	// heuristic window), and the pending TTL has not run out. A judgement
	// of attribution (an alert) waits until it is false. PendingUntil is
	// when the wait ends at the latest (Joiner.pendingUntil), zero when
	// Pending is false. The stores keep PendingUntil alone: what is read
	// back is pending while its deadline is to come (ServeAt).
	Pending      bool      `json:"pending,omitempty"`
	PendingUntil time.Time `json:"pendingUntil,omitzero"`
}

// ServeAt sets p, as stored, as a reader at now sees it: Pending while
// now is before PendingUntil; a deadline that has passed (the row was not
// written again when the wait ended) reads as no wait, and is left out.
func (p *Process) ServeAt(now time.Time) {
	p.Pending = now.Before(p.PendingUntil)
	if !p.Pending {
		p.PendingUntil = time.Time{}
	}
}

// Exit is a process exit.
type Exit struct {
	ProcessID string    `json:"processID"`
	Time      time.Time `json:"time"`
	Code      int       `json:"code"`
}

// Session is one exec request: its audit record as parsed, with the
// joiner's flags (audit_id_conflict) and the other requests that used its
// ID. ProcessCount, FirstProcess and LastProcess are the store's: it
// computes them from the processes attributed to the session, on read.
type Session struct {
	auditlog.ExecRecord
	// SPOExecRequestUID is the SPO webhook's annotation value, if any.
	SPOExecRequestUID string `json:"spoExecRequestUID,omitempty"`
	// Conflicts lists the other requests that used this ID.
	Conflicts []auditlog.ExecRecord `json:"conflicts,omitempty"`

	ProcessCount int       `json:"processCount"`
	FirstProcess time.Time `json:"firstProcess,omitzero"`
	LastProcess  time.Time `json:"lastProcess,omitzero"`
	UpdatedAt    time.Time `json:"updatedAt,omitzero"`
}

// Update is one row for the store to upsert: exactly one of Process and
// Session is set.
type Update struct {
	Process *Process `json:"process,omitempty"`
	Session *Session `json:"session,omitempty"`
	// ExitOnly marks a Process whose exit is its only change since the
	// joiner last handed it out: a store holding that row may write the
	// exit alone (a third of a whole row's cost). Process is still whole,
	// for a store that lacks the row.
	ExitOnly bool `json:"exitOnly,omitempty"`
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
	RootsOverCap     int64 `json:"rootsOverCap"`     // verified roots past maxRootsPerID under one ID, never attributed
	EvictedRoots     int64 `json:"evictedRoots"`     // roots of IDs no longer held, forgotten by the MaxRecords bound
	// UncoveredExecs: ID-less roots the runtime exec'd that no allowed
	// exec request of their pod explains after the pending TTL (flagged
	// uncovered_exec): an exec that bypassed admission.
	UncoveredExecs int64 `json:"uncoveredExecs"`
	// LateProcesses: processes a record answered after their wait had
	// ended (flagged late_audit_record). LateKept: exited processes kept
	// past the pending TTL for such a record (Config.LateWindow);
	// LateForgotten: those that left (the window over, or a process bound)
	// still waiting for one: their stored rows keep what was said.
	LateProcesses int64 `json:"lateProcesses"`
	LateKept      int64 `json:"lateKept"`
	LateForgotten int64 `json:"lateForgotten"`
	// Restored: unattributed processes read back from the store after a
	// restart (RestoreProcesses), held for a late record.
	Restored int64 `json:"restored"`
}

// ProcessOf is the joiner's input for an exec event in the pod pkg/meta
// named (all empty when unknown): the image as it is, the audit ID key's
// evidence and the SPO key's. podUID fills in when the cgroup had none.
func ProcessOf(ev *capture.Event, namespace, pod, container, podUID string) Process {
	p := Process{
		Exec:      ev.Exec,
		Namespace: namespace, Pod: pod, Container: container,
		Start: ev.Time, ExecTime: ev.Time,
		Captured: capture.KeyValue{Value: ev.AuditID, Claimed: ev.ClaimedAuditID, Source: ev.Source, Flags: ev.Flags},
		SPO:      ev.Keys[vocab.SPOKey],
		Bridge:   ev.Keys[vocab.BridgeKey],

		ExecOrigin: ev.ExecOrigin,
	}
	if p.PodUID == "" {
		p.PodUID = podUID
	}
	return p
}

// ExitOf is the joiner's input for an exit event.
func ExitOf(ev *capture.Event) Exit {
	code := 0
	if ev.ExitCode != nil {
		code = *ev.ExitCode
	}
	return Exit{ProcessID: ev.ProcessID, Time: ev.Time, Code: code}
}
