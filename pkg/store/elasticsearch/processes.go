package elasticsearch

import (
	"context"
	"fmt"

	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/store"
)

// maxSessionIDs bounds the auditIDs a user or group filter on processes
// resolves to: Elasticsearch's default index.max_terms_count.
const maxSessionIDs = 65536

// ListProcesses returns one page of processes matching f, newest Start
// first. User and Group select through the process's session, resolved at
// query time, so a process stored before its session is found by user as
// soon as the session arrives.
func (s *Store) ListProcesses(ctx context.Context, f store.ProcessFilter) ([]join.Process, string, error) {
	if _, _, err := parseCursor(f.Cursor); err != nil {
		return nil, "", err // before resolving sessions, which may find none
	}
	var q filters
	if f.User != "" || f.Group != "" {
		ids, err := s.sessionIDs(ctx, f.User, f.Group)
		if err != nil {
			return nil, "", err
		}
		if len(ids) == 0 {
			return []join.Process{}, "", nil
		}
		q.terms("correlator.audit_id", ids)
	}
	q.term("orchestrator.namespace", f.Namespace)
	q.term("orchestrator.resource.name", f.Pod)
	q.term("container.name", f.Container)
	q.term("correlator.audit_id", f.AuditID)
	q.term("correlator.attribution", string(f.Attribution))
	if f.Unattributed {
		q.missing("correlator.attribution") // vocab.AttributionNone: left out
	}
	q.substring("process.command_line", f.Command)
	q.window("@timestamp", f.Since, f.Until)
	return list(ctx, s, s.n.processes, "process.entity_id", q, f.Cursor, f.Limit, decodeProcesses)
}

// sessionIDs lists the auditIDs of the sessions of user (authenticated or
// impersonated) and group, paging by auditID.
func (s *Store) sessionIDs(ctx context.Context, user, group string) ([]string, error) {
	var q filters
	q.term("correlator.users", user)
	q.term("correlator.groups", group)
	var ids []string
	var after []any
	for {
		body := map[string]any{
			"query": q.query(), "size": 10000, "_source": false,
			"sort": []any{map[string]any{"correlator.audit_id": "asc"}},
		}
		if after != nil {
			body["search_after"] = after
		}
		res, err := s.search(ctx, s.n.sessions, body)
		if err != nil {
			return nil, fmt.Errorf("resolving sessions of user %q group %q: %w", user, group, err)
		}
		for _, h := range res.Hits.Hits {
			ids = append(ids, h.ID)
		}
		if len(ids) > maxSessionIDs {
			return nil, fmt.Errorf("resolving sessions of user %q group %q: more than %d sessions; narrow the filter",
				user, group, maxSessionIDs)
		}
		if len(res.Hits.Hits) < 10000 {
			return ids, nil
		}
		after = res.Hits.Hits[len(res.Hits.Hits)-1].Sort
	}
}

func decodeProcesses(hits []hit) ([]join.Process, error) {
	return decodeHits(hits, "process", processFromDoc)
}

// GetSession returns the session with its audit record stages and its
// processes, oldest first, or store.ErrNotFound. Unlike SQLite's, the
// three reads are not one snapshot.
func (s *Store) GetSession(ctx context.Context, auditID string) (store.SessionDetail, error) {
	if auditID == "" {
		return store.SessionDetail{}, fmt.Errorf("reading session %s: %w", auditID, store.ErrNotFound)
	}
	var q filters
	q.term("correlator.audit_id", auditID)
	res, err := s.search(ctx, s.n.sessions, map[string]any{"query": q.query(), "size": 1})
	if err != nil {
		return store.SessionDetail{}, fmt.Errorf("reading session %s: %w", auditID, err)
	}
	if len(res.Hits.Hits) == 0 {
		return store.SessionDetail{}, fmt.Errorf("reading session %s: %w", auditID, store.ErrNotFound)
	}
	ss, err := decodeSessions(res.Hits.Hits)
	if err != nil {
		return store.SessionDetail{}, err
	}
	if err := s.aggregates(ctx, ss); err != nil {
		return store.SessionDetail{}, err
	}
	d := store.SessionDetail{Session: ss[0]}
	if d.AuditRecords, err = s.auditRecords(ctx, auditID); err != nil {
		return store.SessionDetail{}, err
	}
	if d.Processes, err = s.sessionProcesses(ctx, "correlator.audit_id", auditID); err != nil {
		return store.SessionDetail{}, err
	}
	if len(d.Processes) > s.cfg.SessionProcessLimit {
		d.Processes = d.Processes[:s.cfg.SessionProcessLimit]
		d.ProcessesTruncated = true
	}
	if d.Claimants, err = s.sessionProcesses(ctx, "correlator.claimed_audit_id", auditID); err != nil {
		return store.SessionDetail{}, err
	}
	if len(d.Claimants) > s.cfg.SessionProcessLimit {
		d.Claimants = d.Claimants[:s.cfg.SessionProcessLimit]
	}
	if len(d.Claimants) == 0 {
		d.Claimants = nil
	}
	return d, nil
}

func (s *Store) auditRecords(ctx context.Context, auditID string) ([]store.AuditRecord, error) {
	var q filters
	q.term("correlator.audit_id", auditID)
	res, err := s.search(ctx, s.n.audit, map[string]any{
		"query": q.query(), "size": 1000,
		"sort": []any{map[string]any{"@timestamp": "asc"}, map[string]any{"correlator.stage": "asc"}},
	})
	if err != nil {
		return nil, fmt.Errorf("reading audit records of %s: %w", auditID, err)
	}
	return decodeHits(res.Hits.Hits, "audit record", auditFromDoc)
}

// sessionProcesses returns up to SessionProcessLimit+1 processes whose
// field (correlator.audit_id, or correlator.claimed_audit_id for
// claimants) is auditID, oldest first, in pages under the 10000-hit result
// window.
func (s *Store) sessionProcesses(ctx context.Context, field, auditID string) ([]join.Process, error) {
	var q filters
	q.term(field, auditID)
	want := s.cfg.SessionProcessLimit + 1
	out := []join.Process{}
	var after []any
	for len(out) < want {
		size := min(want-len(out), 5000)
		body := map[string]any{
			"query": q.query(), "size": size,
			"sort": []any{map[string]any{"@timestamp": "asc"}, map[string]any{"process.entity_id": "asc"}},
		}
		if after != nil {
			body["search_after"] = after
		}
		res, err := s.search(ctx, s.n.processes, body)
		if err != nil {
			return nil, fmt.Errorf("reading processes of session %s: %w", auditID, err)
		}
		ps, err := decodeProcesses(res.Hits.Hits)
		if err != nil {
			return nil, err
		}
		out = append(out, ps...)
		if len(res.Hits.Hits) < size {
			break
		}
		after = res.Hits.Hits[len(res.Hits.Hits)-1].Sort
	}
	return out, nil
}
