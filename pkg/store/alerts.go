package store

import (
	"context"
	"database/sql"
	"fmt"
)

// ListAlerts returns one page of alerts matching f, newest first, and the
// cursor of the next page ("" after the last).
func (s *Store) ListAlerts(ctx context.Context, f AlertFilter) ([]Alert, string, error) {
	cur, hasCur, err := parseCursor(f.Cursor)
	if err != nil {
		return nil, "", err
	}
	limit := s.limit(f.Limit)
	var w where
	w.eq("rule", f.Rule)
	w.eq("severity", f.Severity)
	w.eq("audit_id", f.AuditID)
	w.eq("process_id", f.ProcessID)
	w.window("time", f.Since, f.Until)
	w.after("time", "seq", cur, hasCur)
	q := `SELECT seq, id, time, rule, severity, message, audit_id, process_id, payload
		FROM alerts` + w.String() + " ORDER BY time DESC, seq DESC LIMIT ?"
	rows, err := s.r.QueryContext(ctx, q, append(w.args, limit+1)...)
	if err != nil {
		return nil, "", fmt.Errorf("querying alerts: %w", err)
	}
	defer rows.Close()
	var out []Alert
	var seqs []int64
	for rows.Next() {
		var (
			a       Alert
			seq, t  int64
			payload sql.NullString
		)
		if err := rows.Scan(&seq, &a.ID, &t, &a.Rule, &a.Severity, &a.Message, &a.AuditID,
			&a.ProcessID, &payload); err != nil {
			return nil, "", fmt.Errorf("reading alert row: %w", err)
		}
		a.Time = fromNanos(t)
		if payload.Valid {
			a.Payload = []byte(payload.String)
		}
		out = append(out, a)
		seqs = append(seqs, seq)
	}
	if err := rows.Err(); err != nil {
		return nil, "", fmt.Errorf("reading alerts: %w", err)
	}
	next := ""
	if len(out) > limit {
		out = out[:limit]
		next = cursor{t: nanos(out[limit-1].Time), id: seqs[limit-1]}.String()
	}
	return out, next, nil
}
