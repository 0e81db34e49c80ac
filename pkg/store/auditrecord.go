package store

import (
	"encoding/json"
	"fmt"

	"github.com/execid/correlator/pkg/auditlog"
)

// AuditRecordOf keeps one exec stage as parsed (the decoder normalises
// every framing to the audit.k8s.io/v1 shape); the agent stores it and
// `audit ship` indexes the same.
func AuditRecordOf(ev *auditlog.Event) (AuditRecord, error) {
	raw, err := json.Marshal(ev)
	if err != nil {
		return AuditRecord{}, fmt.Errorf("encoding audit stage %s/%s: %w", ev.AuditID, ev.Stage, err)
	}
	return AuditRecord{AuditID: ev.RecordID(), Stage: ev.Stage, StageTimestamp: ev.StageTimestamp.Time, Event: raw}, nil
}
