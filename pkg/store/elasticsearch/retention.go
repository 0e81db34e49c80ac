package elasticsearch

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"time"

	"github.com/execid/correlator/pkg/store"
)

const retentionPage = 5000

// DeleteOlderThan removes what stopped mattering before t, by the rules
// every backend keeps (see store.Retainer): exited processes, ended
// sessions with no process left and their audit records, orphaned audit
// records, and alerts. The alerts data stream is also aged out whole by
// ILM.
func (s *Store) DeleteOlderThan(ctx context.Context, t time.Time) (store.Deleted, error) {
	var d store.Deleted
	cut := t.UTC().Format(time.RFC3339Nano)
	// Searches see refreshed segments only: make recent writes visible.
	if err := s.c.do(ctx, "POST", "/"+s.n.sessions+","+s.n.processes+","+s.n.audit+"/_refresh", nil, nil, nil); err != nil {
		return d, fmt.Errorf("refreshing before retention: %w", err)
	}
	var err error
	if d.Processes, err = s.deleteByQuery(ctx, s.n.processes, before("process.end", cut)); err != nil {
		return d, fmt.Errorf("deleting processes older than %s: %w", cut, err)
	}
	if err := s.deleteSessions(ctx, cut, &d); err != nil {
		return d, fmt.Errorf("deleting sessions older than %s: %w", cut, err)
	}
	n, err := s.deleteOrphanRecords(ctx, cut)
	d.AuditRecords += n
	if err != nil {
		return d, fmt.Errorf("deleting orphan audit records older than %s: %w", cut, err)
	}
	if d.Alerts, err = s.deleteByQuery(ctx, s.n.alerts, before("@timestamp", cut)); err != nil {
		return d, fmt.Errorf("deleting alerts older than %s: %w", cut, err)
	}
	return d, nil
}

func before(field, cut string) map[string]any {
	return map[string]any{"range": map[string]any{field: map[string]any{"lt": cut, "format": "strict_date_optional_time_nanos"}}}
}

func (s *Store) deleteByQuery(ctx context.Context, index string, query map[string]any) (int64, error) {
	var res struct {
		Deleted  int64 `json:"deleted"`
		Failures []any `json:"failures"`
	}
	q := url.Values{"refresh": {"true"}, "conflicts": {"proceed"}}
	if err := s.c.do(ctx, "POST", "/"+index+"/_delete_by_query", q, map[string]any{"query": query}, &res); err != nil {
		return 0, err
	}
	if len(res.Failures) > 0 {
		return res.Deleted, fmt.Errorf("deleting from %s: %d failures", index, len(res.Failures))
	}
	return res.Deleted, nil
}

// deleteSessions removes, a page at a time, sessions that ended before cut
// (or, never seen to end, were received before it) and have no process.
func (s *Store) deleteSessions(ctx context.Context, cut string, d *store.Deleted) error {
	expired := map[string]any{"bool": map[string]any{
		"should": []any{
			before("event.end", cut),
			map[string]any{"bool": map[string]any{
				"must_not": []any{map[string]any{"exists": map[string]any{"field": "event.end"}}},
				"filter":   []any{before("@timestamp", cut)},
			}},
		},
		"minimum_should_match": 1,
	}}
	var after []any
	for {
		body := map[string]any{"query": expired, "size": retentionPage, "_source": false,
			"sort": []any{map[string]any{"correlator.audit_id": "asc"}}}
		if after != nil {
			body["search_after"] = after
		}
		res, err := s.search(ctx, s.n.sessions, body)
		if err != nil {
			return err
		}
		hits := res.Hits.Hits
		if len(hits) == 0 {
			return nil
		}
		after = hits[len(hits)-1].Sort
		ids := make([]string, len(hits))
		for i, h := range hits {
			ids[i] = h.ID
		}
		busy, err := s.withProcesses(ctx, ids)
		if err != nil {
			return err
		}
		var gone []string
		for _, id := range ids {
			if !busy[id] {
				gone = append(gone, id)
			}
		}
		if len(gone) > 0 {
			byID := map[string]any{"terms": map[string]any{"correlator.audit_id": gone}}
			n, err := s.deleteByQuery(ctx, s.n.audit, byID)
			d.AuditRecords += n
			if err != nil {
				return err
			}
			n, err = s.deleteByQuery(ctx, s.n.sessions, byID)
			d.Sessions += n
			if err != nil {
				return err
			}
		}
		if len(hits) < retentionPage {
			return nil
		}
	}
}

// withProcesses reports which of ids have a process stored.
func (s *Store) withProcesses(ctx context.Context, ids []string) (map[string]bool, error) {
	res, err := s.search(ctx, s.n.processes, map[string]any{
		"size": 0, "query": map[string]any{"terms": map[string]any{"correlator.audit_id": ids}},
		"aggs": map[string]any{"by": map[string]any{"terms": map[string]any{
			"field": "correlator.audit_id", "size": len(ids), "include": ids}}},
	})
	if err != nil {
		return nil, err
	}
	var aggs struct {
		By struct {
			Buckets []struct {
				Key string `json:"key"`
			} `json:"buckets"`
		} `json:"by"`
	}
	if err := json.Unmarshal(res.Aggregations, &aggs); err != nil {
		return nil, fmt.Errorf("decoding process counts: %w", err)
	}
	out := map[string]bool{}
	for _, b := range aggs.By.Buckets {
		out[b.Key] = true
	}
	return out, nil
}

// deleteOrphanRecords removes audit records before cut whose session is
// not stored.
func (s *Store) deleteOrphanRecords(ctx context.Context, cut string) (int64, error) {
	var total int64
	var after []any
	for {
		body := map[string]any{"query": before("@timestamp", cut), "size": retentionPage,
			"_source": []string{"correlator.audit_id"},
			"sort":    []any{map[string]any{"correlator.audit_id": "asc"}, map[string]any{"correlator.stage": "asc"}}}
		if after != nil {
			body["search_after"] = after
		}
		res, err := s.search(ctx, s.n.audit, body)
		if err != nil {
			return total, err
		}
		hits := res.Hits.Hits
		if len(hits) == 0 {
			return total, nil
		}
		after = hits[len(hits)-1].Sort
		var ids []string
		seen := map[string]bool{}
		for _, h := range hits {
			var d auditDoc
			if err := json.Unmarshal(h.Source, &d); err != nil {
				return total, fmt.Errorf("decoding audit record %s: %w", h.ID, err)
			}
			if !seen[d.Correlator.AuditID] {
				seen[d.Correlator.AuditID] = true
				ids = append(ids, d.Correlator.AuditID)
			}
		}
		found, err := s.search(ctx, s.n.sessions, map[string]any{"size": len(ids), "_source": false,
			"query": map[string]any{"terms": map[string]any{"correlator.audit_id": ids}}})
		if err != nil {
			return total, err
		}
		for _, h := range found.Hits.Hits {
			delete(seen, h.ID)
		}
		var orphans []string
		for _, id := range ids {
			if seen[id] {
				orphans = append(orphans, id)
			}
		}
		if len(orphans) > 0 {
			n, err := s.deleteByQuery(ctx, s.n.audit, map[string]any{"bool": map[string]any{"filter": []any{
				map[string]any{"terms": map[string]any{"correlator.audit_id": orphans}}, before("@timestamp", cut)}}})
			total += n
			if err != nil {
				return total, err
			}
		}
		if len(hits) < retentionPage {
			return total, nil
		}
	}
}

// RunRetention runs store.RunRetention's loop on this store. It returns
// ctx's error.
func (s *Store) RunRetention(ctx context.Context, maxAge, interval time.Duration) error {
	return store.RunRetention(ctx, s, maxAge, interval, s.log, nil)
}
