package elasticsearch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// walk calls fn with every document of index matching query, a page at a
// time, through a point in time so that pages neither skip nor repeat
// documents however the index changes meanwhile. A missing index is an
// empty one.
func (s *Store) walk(ctx context.Context, index string, query map[string]any, fn func([]hit) error) (err error) {
	var pit struct {
		ID string `json:"id"`
	}
	err = s.c.do(ctx, http.MethodPost, "/"+index+"/_pit", map[string][]string{"keep_alive": {"5m"}}, nil, &pit)
	var ae *apiError
	if errors.As(err, &ae) && ae.Status == http.StatusNotFound {
		return nil
	}
	if err != nil {
		return fmt.Errorf("opening a point in time on %s: %w", index, err)
	}
	defer func() {
		// A point in time the cluster already freed (404) is closed; one
		// left open expires with its keep-alive.
		cerr := s.c.do(context.WithoutCancel(ctx), http.MethodDelete, "/_pit", nil, map[string]any{"id": pit.ID}, nil)
		if err == nil && cerr != nil && !(errors.As(cerr, &ae) && ae.Status == http.StatusNotFound) {
			err = fmt.Errorf("closing a point in time on %s: %w", index, cerr)
		}
	}()
	var after []any
	for {
		body := map[string]any{
			"query": query, "size": retentionPage,
			"pit":  map[string]any{"id": pit.ID, "keep_alive": "5m"},
			"sort": []any{map[string]any{"_shard_doc": "asc"}},
		}
		if after != nil {
			body["search_after"] = after
		}
		var res struct {
			PitID string `json:"pit_id"`
			searchResult
		}
		if err := s.c.do(ctx, http.MethodPost, "/_search", nil, body, &res); err != nil {
			return fmt.Errorf("walking %s: %w", index, err)
		}
		if res.PitID != "" {
			pit.ID = res.PitID
		}
		hits := res.Hits.Hits
		if len(hits) == 0 {
			return nil
		}
		if err := fn(hits); err != nil {
			return err
		}
		if len(hits) < retentionPage {
			return nil
		}
		after = hits[len(hits)-1].Sort
	}
}

// walkKept calls fn with the documents of index (of kind k) that must stay
// past cut (keep) or that need not (!keep), by store.Retainer's rules.
func (s *Store) walkKept(ctx context.Context, k kind, index string, cut time.Time, keep bool, fn func([]hit) error) error {
	c := cut.UTC().Format(time.RFC3339Nano)
	switch k {
	case kindProcesses:
		q := anyOf(missing("process.end"), notBefore("process.end", c))
		if !keep {
			q = before("process.end", c)
		}
		return s.walk(ctx, index, q, fn)
	case kindSessions:
		// Ended after cut (or never seen to end and received after it):
		// stays for its time alone; else it stays while a process does.
		recent := anyOf(notBefore("event.end", c),
			map[string]any{"bool": map[string]any{"filter": []any{missing("event.end"), notBefore("@timestamp", c)}}})
		if keep {
			if err := s.walk(ctx, index, recent, fn); err != nil {
				return err
			}
		}
		return s.walk(ctx, index, noneOf(recent), func(hits []hit) error {
			return s.pickByStored(ctx, hits, s.n.processes, keep, fn)
		})
	case kindAudit:
		return s.walk(ctx, index, map[string]any{"match_all": map[string]any{}}, func(hits []hit) error {
			return s.pickByStored(ctx, hits, s.n.sessions, keep, fn)
		})
	}
	return fmt.Errorf("walking %s: no retention rule for kind %s", index, k)
}

// pickByStored calls fn with the hits whose correlator.audit_id has a
// document in pattern (keep) or has none (!keep).
func (s *Store) pickByStored(ctx context.Context, hits []hit, pattern string, keep bool, fn func([]hit) error) error {
	ids := make([]string, 0, len(hits))
	idOf := make([]string, len(hits))
	for i, h := range hits {
		var d struct {
			Correlator struct {
				AuditID string `json:"audit_id"`
			} `json:"correlator"`
		}
		if err := json.Unmarshal(h.Source, &d); err != nil {
			return fmt.Errorf("decoding %s: %w", h.ID, err)
		}
		idOf[i] = d.Correlator.AuditID
		ids = append(ids, d.Correlator.AuditID)
	}
	stored, err := s.storedIDs(ctx, pattern, ids)
	if err != nil {
		return err
	}
	var picked []hit
	for i, h := range hits {
		if stored[idOf[i]] == keep {
			picked = append(picked, h)
		}
	}
	if len(picked) == 0 {
		return nil
	}
	return fn(picked)
}

// storedIDs reports which of ids have a document in pattern.
func (s *Store) storedIDs(ctx context.Context, pattern string, ids []string) (map[string]bool, error) {
	res, err := s.search(ctx, pattern, map[string]any{
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
	if len(res.Aggregations) > 0 {
		if err := json.Unmarshal(res.Aggregations, &aggs); err != nil {
			return nil, fmt.Errorf("decoding stored IDs: %w", err)
		}
	}
	out := make(map[string]bool, len(aggs.By.Buckets))
	for _, b := range aggs.By.Buckets {
		out[b.Key] = true
	}
	return out, nil
}
