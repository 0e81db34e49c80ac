package elasticsearch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"
)

// migrateLegacy moves the single sessions, processes and audit indices of
// a store from before time partitioning into the period indices, each
// document into the period its time chose, then deletes them. Reads see
// both meanwhile (the read patterns cover the legacy names). A document
// already in its period index was written since the upgrade and is newer:
// the copy is a create, and a conflict keeps the newer one. The legacy
// alerts data stream is left to the ILM policy it was created with.
func (s *Store) migrateLegacy(ctx context.Context, l *lease) error {
	for _, k := range []kind{kindSessions, kindProcesses, kindAudit} {
		old := s.n.legacy(k)
		var rows []struct {
			Index string `json:"index"`
		}
		err := s.c.do(ctx, http.MethodGet, "/_cat/indices/"+old, url.Values{"format": {"json"}, "h": {"index"}}, nil, &rows)
		var ae *apiError
		if errors.As(err, &ae) && ae.Status == http.StatusNotFound {
			continue
		}
		if err != nil {
			return fmt.Errorf("looking for the legacy index %s: %w", old, err)
		}
		if len(rows) != 1 || rows[0].Index != old {
			continue // an alias or a data stream of that name: not ours to move
		}
		if err := s.c.do(ctx, http.MethodPost, "/"+old+"/_refresh", nil, nil, nil); err != nil {
			return fmt.Errorf("refreshing %s: %w", old, err)
		}
		var moved int
		err = s.walk(ctx, old, map[string]any{"match_all": map[string]any{}}, func(hits []hit) error {
			ops := make([]op, len(hits))
			for i, h := range hits {
				var d struct {
					Timestamp string `json:"@timestamp"`
				}
				if err := json.Unmarshal(h.Source, &d); err != nil {
					return fmt.Errorf("decoding %s %s: %w", k, h.ID, err)
				}
				t, err := parseTS(d.Timestamp)
				if err != nil {
					return fmt.Errorf("decoding %s %s: %w", k, h.ID, err)
				}
				ops[i] = op{index: s.n.index(k, t), action: "create", id: h.ID, what: string(k) + " " + h.ID, body: h.Source}
			}
			moved += len(ops)
			return s.c.bulk(ctx, s.metrics.bulk, ops)
		})
		if err != nil {
			return fmt.Errorf("moving %s into period indices: %w", old, err)
		}
		if err := s.c.do(ctx, http.MethodDelete, "/"+old, nil, nil, nil); err != nil {
			return fmt.Errorf("deleting the legacy index %s: %w", old, err)
		}
		s.log.Info().Str("index", old).Int("documents", moved).Msg("moved a legacy single index into period indices")
		if l != nil {
			l.renew(ctx, s.c, time.Now())
		}
	}
	return nil
}
