package agent

import (
	"github.com/execid/correlator/pkg/auditlog"
	"github.com/execid/correlator/pkg/store"
)

// auditRecord is ev as the store keeps it; a stage that does not encode
// is kept without its body, and said.
func (a *Agent) auditRecord(ev *auditlog.Event) store.AuditRecord {
	r, err := store.AuditRecordOf(ev)
	if err != nil {
		a.log.Warn().Err(err).Msg("keeping audit stage")
		r = store.AuditRecord{AuditID: ev.RecordID(), Stage: ev.Stage, StageTimestamp: ev.StageTimestamp.Time}
	}
	return r
}
