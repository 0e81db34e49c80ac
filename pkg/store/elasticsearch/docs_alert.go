package elasticsearch

import (
	"encoding/json"
	"strings"

	"github.com/execid/correlator/pkg/store"
)

type auditDoc struct {
	Timestamp  string   `json:"@timestamp"`
	Event      ecsEvent `json:"event"`
	Correlator struct {
		AuditID    string `json:"audit_id"`
		Stage      string `json:"stage"`
		AuditEvent string `json:"audit_event"`
	} `json:"correlator"`
}

func auditToDoc(r *store.AuditRecord) auditDoc {
	var d auditDoc
	d.Timestamp = ts(r.StageTimestamp)
	d.Event = ecsEvent{Kind: "event", Category: []string{"session"}, Action: r.Stage, Dataset: "correlator.audit"}
	d.Correlator.AuditID, d.Correlator.Stage, d.Correlator.AuditEvent = r.AuditID, r.Stage, string(r.Event)
	if d.Correlator.AuditEvent == "" {
		d.Correlator.AuditEvent = "null"
	}
	return d
}

func auditFromDoc(d *auditDoc) (store.AuditRecord, error) {
	t, err := parseTS(d.Timestamp)
	return store.AuditRecord{AuditID: d.Correlator.AuditID, Stage: d.Correlator.Stage, StageTimestamp: t,
		Event: json.RawMessage(d.Correlator.AuditEvent)}, err
}

type alertDoc struct {
	Timestamp string   `json:"@timestamp"`
	Event     ecsEvent `json:"event"`
	Rule      struct {
		Name string `json:"name"`
	} `json:"rule"`
	Message string `json:"message,omitempty"`
	Process *struct {
		EntityID string `json:"entity_id"`
	} `json:"process,omitempty"`
	Correlator struct {
		AuditID   string       `json:"audit_id,omitempty"`
		ProcessID string       `json:"process_id,omitempty"`
		Severity  string       `json:"severity,omitempty"`
		Payload   string       `json:"payload,omitempty"`
		Alert     *alertStatus `json:"alert,omitempty"`
	} `json:"correlator"`
}

// alertStatus is correlator.alert: an alert's resolution (store.Alert's
// Status, ResolvedAt, Resolution), absent while it stands as raised.
type alertStatus struct {
	Status     string `json:"status,omitempty"`
	ResolvedAt string `json:"resolved_at,omitempty"`
	Resolution string `json:"resolution,omitempty"`
}

func alertStatusOf(a *store.Alert) *alertStatus {
	if a.Status == "" && a.ResolvedAt.IsZero() && a.Resolution == "" {
		return nil
	}
	return &alertStatus{Status: a.Status, ResolvedAt: optTS(a.ResolvedAt), Resolution: a.Resolution}
}

// severityScore maps a severity name to ECS's numeric event.severity, on
// the scale Elastic's detection rules use.
func severityScore(s string) int {
	switch strings.ToLower(s) {
	case "info", "informational":
		return 1
	case "low":
		return 21
	case "medium":
		return 47
	case "high":
		return 73
	case "critical":
		return 99
	}
	return 0
}

func alertToDoc(a *store.Alert) alertDoc {
	var d alertDoc
	d.Timestamp = ts(a.Time)
	d.Event = ecsEvent{Kind: "alert", Dataset: "correlator.alerts", ID: a.ID, Severity: severityScore(a.Severity)}
	d.Rule.Name, d.Message = a.Rule, a.Message
	if a.ProcessID != "" {
		d.Process = &struct {
			EntityID string `json:"entity_id"`
		}{EntityID: a.ProcessID}
	}
	d.Correlator.AuditID, d.Correlator.ProcessID, d.Correlator.Severity = a.AuditID, a.ProcessID, a.Severity
	d.Correlator.Payload = string(a.Payload)
	d.Correlator.Alert = alertStatusOf(a)
	return d
}

// resolutionUpdate is the bulk update body of a resolution: on a stored
// alert it sets correlator.alert alone, keeping what the alert said;
// where none is stored (dropped by retention, never delivered here) the
// resolution is stored whole, as given.
func resolutionUpdate(a *store.Alert) any {
	var partial struct {
		Correlator struct {
			Alert *alertStatus `json:"alert"`
		} `json:"correlator"`
	}
	partial.Correlator.Alert = alertStatusOf(a)
	return map[string]any{"doc": partial, "upsert": alertToDoc(a)}
}

func alertFromDoc(d *alertDoc) (store.Alert, error) {
	a := store.Alert{ID: d.Event.ID, Rule: d.Rule.Name, Severity: d.Correlator.Severity, Message: d.Message,
		AuditID: d.Correlator.AuditID, ProcessID: d.Correlator.ProcessID}
	if d.Correlator.Payload != "" {
		a.Payload = json.RawMessage(d.Correlator.Payload)
	}
	var err error
	if a.Time, err = parseTS(d.Timestamp); err != nil {
		return a, err
	}
	if st := d.Correlator.Alert; st != nil {
		a.Status, a.Resolution = st.Status, st.Resolution
		a.ResolvedAt, err = parseTS(st.ResolvedAt)
	}
	return a, err
}
