package agent

import (
	"encoding/json"
	"fmt"

	"github.com/execid/correlator/pkg/auditlog"
	"github.com/execid/correlator/pkg/store"
)

// AuditRecord keeps one exec stage as parsed (the decoder normalises every
// framing to the audit.k8s.io/v1 shape); `audit ship` indexes the same.
func AuditRecord(ev *auditlog.Event) (store.AuditRecord, error) {
	raw, err := json.Marshal(ev)
	if err != nil {
		return store.AuditRecord{}, fmt.Errorf("encoding audit stage %s/%s: %w", ev.AuditID, ev.Stage, err)
	}
	return store.AuditRecord{AuditID: ev.RecordID(), Stage: ev.Stage, StageTimestamp: ev.StageTimestamp.Time, Event: raw}, nil
}

func (a *Agent) auditRecord(ev *auditlog.Event) store.AuditRecord {
	r, err := AuditRecord(ev)
	if err != nil {
		a.log.Warn().Err(err).Msg("keeping audit stage")
		r = store.AuditRecord{AuditID: ev.RecordID(), Stage: ev.Stage, StageTimestamp: ev.StageTimestamp.Time}
	}
	return r
}
