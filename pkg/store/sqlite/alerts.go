package sqlite

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/execid/correlator/pkg/store"
)

// ListAlerts returns one page of alerts matching f, newest first, and the
// cursor of the next page ("" after the last).
func (s *Store) ListAlerts(ctx context.Context, f store.AlertFilter) ([]store.Alert, string, error) {
	l := listing{cols: "seq, id, time, rule, severity, message, audit_id, process_id, payload, status, resolved_at, resolution",
		from: "alerts", timeCol: "time", idCol: "seq"}
	l.w.eq("rule", f.Rule)
	l.w.eq("severity", f.Severity)
	l.w.eq("audit_id", f.AuditID)
	l.w.eq("process_id", f.ProcessID)
	l.w.window("time", f.Since, f.Until)
	return list(ctx, s, "alerts", l, f.Cursor, f.Limit, scanAlert)
}

func scanAlert(sc scanner) (store.Alert, cursor, error) {
	var (
		a          store.Alert
		seq, t     int64
		payload    sql.NullString
		resolvedAt sql.NullInt64
	)
	if err := sc.Scan(&seq, &a.ID, &t, &a.Rule, &a.Severity, &a.Message, &a.AuditID,
		&a.ProcessID, &payload, &a.Status, &resolvedAt, &a.Resolution); err != nil {
		return store.Alert{}, cursor{}, fmt.Errorf("reading alert row: %w", err)
	}
	a.Time = fromNanos(t)
	if payload.Valid {
		a.Payload = []byte(payload.String)
	}
	if resolvedAt.Valid {
		a.ResolvedAt = fromNanos(resolvedAt.Int64)
	}
	return a, cursor{t: t, id: seq}, nil
}
