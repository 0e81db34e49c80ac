package elasticsearch

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"time"

	"github.com/execid/correlator/pkg/store"
)

const retentionPage = 5000

// DeleteOlderThan drops every period index whose period ended before t,
// keeping store.Retainer's rules by carrying what must stay into the
// kind's carried index first: a process still running or that exited
// after t; a session that ended after t or still has a process stored;
// an audit record of a stored session. It never deletes by query: an index
// goes whole, so a pass costs a few requests an index plus the documents
// it carries, not the documents it drops. Documents carried earlier that
// no longer qualify are deleted from the carried index by ID. The counts
// are of documents gone.
//
// A late write to a dropped index (a running process's exit) creates the
// index again; the next pass carries that newer copy over the older one.
// Until then a list may show such a process twice.
func (s *Store) DeleteOlderThan(ctx context.Context, t time.Time) (store.Deleted, error) {
	return s.retain(ctx, t, nil)
}

// retain is one pass; l (may be nil) is renewed as it goes.
func (s *Store) retain(ctx context.Context, t time.Time, l *lease) (store.Deleted, error) {
	var d store.Deleted
	if s.kinds == nil {
		if err := s.migrateLegacy(ctx, l); err != nil {
			return d, err
		}
	}
	if err := s.refresh(ctx); err != nil {
		return d, fmt.Errorf("refreshing before retention: %w", err)
	}
	counts := map[kind]*int64{kindProcesses: &d.Processes, kindSessions: &d.Sessions,
		kindAudit: &d.AuditRecords, kindAlerts: &d.Alerts}
	for _, k := range retentionOrder {
		if s.kinds != nil && !slices.Contains(s.kinds, k) {
			continue
		}
		n, err := s.retainKind(ctx, k, t, l)
		*counts[k] += n
		if err != nil {
			return d, fmt.Errorf("applying retention to %s before %s: %w", k, t.UTC().Format(time.RFC3339), err)
		}
	}
	return d, nil
}

// retainKind drops k's indices that ended before cut, carrying what stays,
// then prunes k's carried index.
func (s *Store) retainKind(ctx context.Context, k kind, cut time.Time, l *lease) (int64, error) {
	idxs, err := s.periodIndices(ctx, k)
	if err != nil {
		return 0, err
	}
	var gone int64
	for _, ix := range idxs {
		if ix.start.Add(s.n.period).After(cut) {
			continue
		}
		n, err := s.dropIndex(ctx, k, ix.name, cut)
		gone += n
		if err != nil {
			return gone, err
		}
		s.metrics.dropped.Inc()
		if l != nil {
			l.renew(ctx, s.c, s.now())
		}
	}
	if k == kindAlerts {
		return gone, nil // alerts are never carried
	}
	n, err := s.pruneCarried(ctx, k, cut)
	return gone + n, err
}

type periodIndex struct {
	name  string
	start time.Time
}

// periodIndices lists k's period indices, oldest first.
func (s *Store) periodIndices(ctx context.Context, k kind) ([]periodIndex, error) {
	var rows []struct {
		Index string `json:"index"`
	}
	q := url.Values{"format": {"json"}, "h": {"index"}}
	if err := s.c.do(ctx, http.MethodGet, "/_cat/indices/"+s.n.templatePattern(k), q, nil, &rows); err != nil {
		return nil, fmt.Errorf("listing %s indices: %w", k, err)
	}
	var out []periodIndex
	for _, r := range rows {
		if t, ok := s.n.parsePeriodIndex(k, r.Index); ok {
			out = append(out, periodIndex{r.Index, t})
		}
	}
	slices.SortFunc(out, func(a, b periodIndex) int { return a.start.Compare(b.start) })
	return out, nil
}

// dropIndex carries what must stay out of idx, then deletes idx, and
// returns how many documents went with it.
func (s *Store) dropIndex(ctx context.Context, k kind, idx string, cut time.Time) (int64, error) {
	total, err := s.count(ctx, idx)
	if err != nil {
		return 0, err
	}
	var carried int64
	if k != kindAlerts {
		if carried, err = s.carry(ctx, k, idx, cut); err != nil {
			return 0, fmt.Errorf("carrying from %s: %w", idx, err)
		}
	}
	err = s.c.do(ctx, http.MethodDelete, "/"+idx, nil, nil, nil)
	var ae *apiError
	if err != nil && !(errors.As(err, &ae) && ae.Status == http.StatusNotFound) {
		return 0, fmt.Errorf("deleting index %s: %w", idx, err)
	}
	return total - carried, nil
}

// carry copies idx's documents that must stay into k's carried index,
// replacing older copies there, and makes them searchable.
func (s *Store) carry(ctx context.Context, k kind, idx string, cut time.Time) (int64, error) {
	var n int64
	dst := s.n.carried(k)
	err := s.walkKept(ctx, k, idx, cut, true, func(hits []hit) error {
		ops := make([]op, len(hits))
		for i, h := range hits {
			ops[i] = op{index: dst, action: "index", id: h.ID, what: string(k) + " " + h.ID, body: h.Source}
		}
		n += int64(len(ops))
		return s.c.bulk(ctx, s.metrics.bulk, ops)
	})
	if err != nil {
		return n, err
	}
	if n > 0 {
		err = s.c.do(ctx, http.MethodPost, "/"+dst+"/_refresh", nil, nil, nil)
	}
	return n, err
}

// pruneCarried deletes, by ID, k's carried documents that no longer need
// to stay.
func (s *Store) pruneCarried(ctx context.Context, k kind, cut time.Time) (int64, error) {
	src := s.n.carried(k)
	var n int64
	err := s.walkKept(ctx, k, src, cut, false, func(hits []hit) error {
		ops := make([]op, len(hits))
		for i, h := range hits {
			ops[i] = op{index: src, action: "delete", id: h.ID, what: string(k) + " " + h.ID}
		}
		n += int64(len(ops))
		return s.c.bulk(ctx, s.metrics.bulk, ops)
	})
	if err == nil && n > 0 {
		err = s.c.do(ctx, http.MethodPost, "/"+src+"/_refresh", nil, nil, nil)
	}
	return n, err
}

// refresh makes every write searchable before retention reads.
func (s *Store) refresh(ctx context.Context) error {
	q := url.Values{"ignore_unavailable": {"true"}, "allow_no_indices": {"true"}}
	return s.c.do(ctx, http.MethodPost, "/"+s.n.sessions+","+s.n.processes+","+s.n.audit+"/_refresh", q, nil, nil)
}

func (s *Store) count(ctx context.Context, idx string) (int64, error) {
	var res struct {
		Count int64 `json:"count"`
	}
	if err := s.c.do(ctx, http.MethodGet, "/"+idx+"/_count", nil, nil, &res); err != nil {
		return 0, fmt.Errorf("counting %s: %w", idx, err)
	}
	return res.Count, nil
}

func before(field, cut string) map[string]any {
	return map[string]any{"range": map[string]any{field: map[string]any{"lt": cut, "format": "strict_date_optional_time_nanos"}}}
}

func notBefore(field, cut string) map[string]any {
	return map[string]any{"range": map[string]any{field: map[string]any{"gte": cut, "format": "strict_date_optional_time_nanos"}}}
}

func missing(field string) map[string]any {
	return map[string]any{"bool": map[string]any{"must_not": []any{map[string]any{"exists": map[string]any{"field": field}}}}}
}

func anyOf(qs ...any) map[string]any {
	return map[string]any{"bool": map[string]any{"should": qs, "minimum_should_match": 1}}
}

func noneOf(qs ...any) map[string]any {
	return map[string]any{"bool": map[string]any{"must_not": qs}}
}

// RunRetention applies retention every interval until ctx is done,
// once per cluster: before each pass the agent takes the lease in
// <prefix>-meta, and skips the pass when another agent holds it or a pass
// ended less than interval ago. It returns ctx's error.
func (s *Store) RunRetention(ctx context.Context, maxAge, interval time.Duration) error {
	if s.cfg.RetentionMode == RetentionOff {
		s.log.Info().Msg("retention is another process's (--es-retention off)")
		<-ctx.Done()
		return ctx.Err()
	}
	// Not spread: the lease already orders the fleet's passes, and an
	// early one would find the last pass under interval ago and skip.
	return store.RunRetention(ctx, leased{s, interval}, maxAge, interval, 0, s.log, nil)
}

// leased is the Store as a Retainer whose passes take the lease.
type leased struct {
	s        *Store
	interval time.Duration
}

func (r leased) DeleteOlderThan(ctx context.Context, t time.Time) (store.Deleted, error) {
	return r.s.RetainOnce(ctx, t, r.interval)
}

// RetainOnce runs one pass if this store takes the lease (see
// RunRetention), and reports store.Deleted{} and nil when it does not.
func (s *Store) RetainOnce(ctx context.Context, t time.Time, interval time.Duration) (store.Deleted, error) {
	l, err := s.c.takeLease(ctx, s.n, s.leaseID, s.holder, s.cfg.LeaseTTL, interval, s.now())
	if errors.Is(err, errLeaseHeld) {
		s.metrics.passes.WithLabelValues("skipped").Inc()
		return store.Deleted{}, nil
	}
	if err != nil {
		s.metrics.passes.WithLabelValues("error").Inc()
		return store.Deleted{}, err
	}
	d, err := s.retain(ctx, t, l)
	if rerr := l.release(context.WithoutCancel(ctx), s.c, s.now(), err == nil); rerr != nil {
		err = errors.Join(err, rerr)
	}
	if err != nil {
		s.metrics.passes.WithLabelValues("error").Inc()
		return d, err
	}
	s.metrics.passes.WithLabelValues("ran").Inc()
	return d, nil
}
