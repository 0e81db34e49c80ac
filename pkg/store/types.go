package store

import (
	"encoding/json"
	"iter"
	"time"

	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/vocab"
)

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
	// Status is "" for an alert as raised, AlertResolved for a resolution:
	// a later state (a late audit record) contradicts what the alert said.
	// A resolution has the ID (the dedupe key), rule, severity, message
	// and time of the alert it resolves; ResolvedAt and Resolution say
	// when and why. A store keeps it on the alert's row; a sink delivers
	// it as an event of its own.
	Status     string    `json:"status,omitempty"`
	ResolvedAt time.Time `json:"resolvedAt,omitzero"`
	Resolution string    `json:"resolution,omitempty"`
}

// AlertResolved is the Status of a resolution.
const AlertResolved = "resolved"

// SessionDetail is a session with its audit record stages and the
// processes attributed to it, oldest first, for drawing the process tree.
type SessionDetail struct {
	join.Session
	AuditRecords []AuditRecord  `json:"auditRecords,omitempty"`
	Processes    []join.Process `json:"processes"`
	// Claimants are processes that carried this session's ID without being
	// attributed to it (ClaimedAuditID): forged roots, replays of a denied
	// ID, pod mismatches, env forgeries. Evidence, never the session's own.
	Claimants []join.Process `json:"claimants,omitempty"`
	// ProcessesTruncated is set when the session has more processes than
	// the backend's SessionProcessLimit; Processes then holds the oldest
	// ones.
	ProcessesTruncated bool `json:"processesTruncated,omitempty"`
}

// Batch is one unit of writing: everything in it commits in one
// transaction, or none of it does.
type Batch struct {
	Sessions  []join.Session
	Processes []join.Process
	// Exits are processes handed out before whose exit is their only
	// change since (join.Update.ExitOnly). Each is the whole row: a backend
	// may write the exit alone where it holds the row, and writes the row
	// whole where it does not.
	Exits        []join.Process
	AuditRecords []AuditRecord
	Alerts       []Alert
}

// Len is the number of rows in the batch.
func (b Batch) Len() int {
	return len(b.Sessions) + len(b.Processes) + len(b.Exits) + len(b.AuditRecords) + len(b.Alerts)
}

// AllProcesses yields the batch's whole processes, then its exits.
func (b *Batch) AllProcesses() iter.Seq[*join.Process] {
	return func(yield func(*join.Process) bool) {
		for _, rows := range [][]join.Process{b.Processes, b.Exits} {
			for i := range rows {
				if !yield(&rows[i]) {
					return
				}
			}
		}
	}
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
// case-sensitive substring of the space-joined argv. Unattributed selects
// the processes with no attribution (vocab.AttributionNone), which a zero
// Attribution cannot ask for: those a late audit record may still
// attribute, read back for the joiner after it forgot them.
type ProcessFilter struct {
	User         string
	Group        string
	Namespace    string
	Pod          string
	Container    string
	Since        time.Time
	Until        time.Time
	Command      string
	AuditID      string
	Attribution  vocab.Attribution
	Unattributed bool
	Limit        int
	Cursor       string
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
