package elasticsearch

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/store"
)

// cursor is a keyset position: the last row's time in nanoseconds and its
// key, the search_after of the next page. On the wire it is
// base64url("es1.<nanos>.<key>"), opaque to clients.
type cursor struct {
	nanos int64
	key   string
}

func (c cursor) String() string {
	return base64.RawURLEncoding.EncodeToString([]byte("es1." + strconv.FormatInt(c.nanos, 10) + "." + c.key))
}

// parseCursor decodes a cursor; "" is the first page.
func parseCursor(s string) (cursor, bool, error) {
	if s == "" {
		return cursor{}, false, nil
	}
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return cursor{}, false, fmt.Errorf("decoding cursor: %w", store.ErrInvalidCursor)
	}
	rest, ok := strings.CutPrefix(string(raw), "es1.")
	if !ok {
		return cursor{}, false, fmt.Errorf("decoding cursor: %w", store.ErrInvalidCursor)
	}
	num, key, ok := strings.Cut(rest, ".")
	n, err := strconv.ParseInt(num, 10, 64)
	if !ok || err != nil || n < 0 || key == "" {
		return cursor{}, false, fmt.Errorf("decoding cursor: %w", store.ErrInvalidCursor)
	}
	return cursor{nanos: n, key: key}, true, nil
}

// hit is one search hit; Sort holds json.Numbers and strings.
type hit struct {
	ID     string          `json:"_id"`
	Source json.RawMessage `json:"_source"`
	Sort   []any           `json:"sort"`
}

type searchResult struct {
	Hits struct {
		Hits []hit `json:"hits"`
	} `json:"hits"`
	Aggregations json.RawMessage `json:"aggregations"`
}

// filters builds a bool filter list.
type filters []any

func (f *filters) term(field, v string) {
	if v != "" {
		*f = append(*f, map[string]any{"term": map[string]any{field: v}})
	}
}

func (f *filters) terms(field string, vs []string) {
	*f = append(*f, map[string]any{"terms": map[string]any{field: vs}})
}

// window bounds a time field: since inclusive, until exclusive.
func (f *filters) window(field string, since, until time.Time) {
	r := map[string]any{}
	if !since.IsZero() {
		r["gte"] = since.UTC().Format(time.RFC3339Nano)
	}
	if !until.IsZero() {
		r["lt"] = until.UTC().Format(time.RFC3339Nano)
	}
	if len(r) > 0 {
		r["format"] = "strict_date_optional_time_nanos"
		*f = append(*f, map[string]any{"range": map[string]any{field: r}})
	}
}

// missing matches the documents without field: processToDoc leaves an
// empty one out.
func (f *filters) missing(field string) {
	*f = append(*f, map[string]any{"bool": map[string]any{"must_not": map[string]any{"exists": map[string]any{"field": field}}}})
}

// substring is a case-sensitive substring match on a wildcard field.
func (f *filters) substring(field, sub string) {
	if sub == "" {
		return
	}
	esc := strings.NewReplacer(`\`, `\\`, `*`, `\*`, `?`, `\?`).Replace(sub)
	*f = append(*f, map[string]any{"wildcard": map[string]any{field: map[string]any{"value": "*" + esc + "*"}}})
}

func (f filters) query() map[string]any {
	if len(f) == 0 {
		return map[string]any{"match_all": map[string]any{}}
	}
	return map[string]any{"bool": map[string]any{"filter": []any(f)}}
}

func (s *Store) search(ctx context.Context, index string, body map[string]any) (searchResult, error) {
	var res searchResult
	err := s.c.do(ctx, "POST", "/"+index+"/_search", nil, body, &res)
	if err != nil {
		return res, fmt.Errorf("searching %s: %w", index, err)
	}
	return res, nil
}

// list runs one newest-first keyset page of index: q's matches sorted by
// (@timestamp, keyField) descending, at most n of them (the configured
// default for n <= 0) after cursor c, fetching one hit more to tell
// whether a next page exists. It returns the page, decoded by decode, and
// the cursor of the next ("" after the last).
func list[T any](ctx context.Context, s *Store, index, keyField string, q filters, c string, n int,
	decode func([]hit) ([]T, error)) ([]T, string, error) {
	cur, hasCur, err := parseCursor(c)
	if err != nil {
		return nil, "", err
	}
	limit := store.PageLimit(n, s.cfg.DefaultLimit, s.cfg.MaxLimit)
	body := map[string]any{
		"query": q.query(),
		"size":  limit + 1,
		"sort":  []any{map[string]any{"@timestamp": "desc"}, map[string]any{keyField: "desc"}},
	}
	if hasCur {
		body["search_after"] = []any{cur.nanos, cur.key}
	}
	res, err := s.search(ctx, index, body)
	if err != nil {
		return nil, "", err
	}
	hits, next := res.Hits.Hits, ""
	if len(hits) > limit {
		hits = hits[:limit]
		last, err := cursorOf(hits[limit-1])
		if err != nil {
			return nil, "", err
		}
		next = last.String()
	}
	out, err := decode(hits)
	if err != nil {
		return nil, "", err
	}
	return out, next, nil
}

// decodeHits decodes each hit's source as a D and converts it with from;
// what names the documents in errors.
func decodeHits[D, T any](hits []hit, what string, from func(*D) (T, error)) ([]T, error) {
	out := make([]T, 0, len(hits))
	for _, h := range hits {
		var d D
		if err := json.Unmarshal(h.Source, &d); err != nil {
			return nil, fmt.Errorf("decoding %s %s: %w", what, h.ID, err)
		}
		v, err := from(&d)
		if err != nil {
			return nil, fmt.Errorf("decoding %s %s: %w", what, h.ID, err)
		}
		out = append(out, v)
	}
	return out, nil
}

func cursorOf(h hit) (cursor, error) {
	if len(h.Sort) != 2 {
		return cursor{}, fmt.Errorf("reading sort values of %s: got %d", h.ID, len(h.Sort))
	}
	n, ok := h.Sort[0].(json.Number)
	key, ok2 := h.Sort[1].(string)
	if !ok || !ok2 {
		return cursor{}, fmt.Errorf("reading sort values of %s: unexpected %v", h.ID, h.Sort)
	}
	i, err := n.Int64()
	if err != nil {
		return cursor{}, fmt.Errorf("reading sort value of %s: %w", h.ID, err)
	}
	return cursor{nanos: i, key: key}, nil
}

// ListSessions returns one page of sessions matching f, newest
// RequestReceived first, with the cursor of the next page ("" after the
// last).
func (s *Store) ListSessions(ctx context.Context, f store.SessionFilter) ([]join.Session, string, error) {
	out, next, err := list(ctx, s, s.n.sessions, "correlator.audit_id", sessionFilters(f), f.Cursor, f.Limit, decodeSessions)
	if err != nil {
		return nil, "", err
	}
	if err := s.aggregates(ctx, out); err != nil {
		return nil, "", err
	}
	return out, next, nil
}

func sessionFilters(f store.SessionFilter) filters {
	var q filters
	q.term("correlator.users", f.User)
	q.term("correlator.groups", f.Group)
	q.term("orchestrator.namespace", f.Namespace)
	q.term("orchestrator.resource.name", f.Pod)
	q.term("container.name", f.Container)
	q.substring("process.command_line", f.Command)
	q.window("@timestamp", f.Since, f.Until)
	return q
}

func decodeSessions(hits []hit) ([]join.Session, error) {
	return decodeHits(hits, "session", sessionFromDoc)
}

// aggregates fills FirstProcess, LastProcess and ProcessCount from the
// processes attributed to each session, in one aggregation.
func (s *Store) aggregates(ctx context.Context, ss []join.Session) error {
	if len(ss) == 0 {
		return nil
	}
	ids := make([]string, len(ss))
	for i := range ss {
		ids[i] = ss[i].AuditID
	}
	first := func(order string) map[string]any {
		return map[string]any{"top_hits": map[string]any{
			"size": 1, "sort": []any{map[string]any{"@timestamp": order}}, "_source": []string{"@timestamp"},
		}}
	}
	body := map[string]any{
		"size":  0,
		"query": map[string]any{"terms": map[string]any{"correlator.audit_id": ids}},
		"aggs": map[string]any{"by": map[string]any{
			"terms": map[string]any{"field": "correlator.audit_id", "size": len(ids), "include": ids},
			"aggs":  map[string]any{"first": first("asc"), "last": first("desc")},
		}},
	}
	res, err := s.search(ctx, s.n.processes, body)
	if err != nil {
		return fmt.Errorf("aggregating processes of %d sessions: %w", len(ss), err)
	}
	type top struct {
		Hits struct {
			Hits []struct {
				Source struct {
					Timestamp string `json:"@timestamp"`
				} `json:"_source"`
			} `json:"hits"`
		} `json:"hits"`
	}
	var aggs struct {
		By struct {
			Buckets []struct {
				Key      string `json:"key"`
				DocCount int    `json:"doc_count"`
				First    top    `json:"first"`
				Last     top    `json:"last"`
			} `json:"buckets"`
		} `json:"by"`
	}
	if len(res.Aggregations) == 0 {
		return nil // no processes index yet: a search of no index has no aggregations
	}
	if err := json.Unmarshal(res.Aggregations, &aggs); err != nil {
		return fmt.Errorf("decoding process aggregates: %w", err)
	}
	at := map[string]int{}
	for i := range ss {
		at[ss[i].AuditID] = i
	}
	for _, b := range aggs.By.Buckets {
		i, ok := at[b.Key]
		if !ok || len(b.First.Hits.Hits) == 0 || len(b.Last.Hits.Hits) == 0 {
			continue
		}
		ss[i].ProcessCount = b.DocCount
		if ss[i].FirstProcess, err = parseTS(b.First.Hits.Hits[0].Source.Timestamp); err != nil {
			return err
		}
		if ss[i].LastProcess, err = parseTS(b.Last.Hits.Hits[0].Source.Timestamp); err != nil {
			return err
		}
	}
	return nil
}

// ListAlerts returns one page of alerts matching f, newest first.
func (s *Store) ListAlerts(ctx context.Context, f store.AlertFilter) ([]store.Alert, string, error) {
	var q filters
	q.term("rule.name", f.Rule)
	q.term("correlator.severity", f.Severity)
	q.term("correlator.audit_id", f.AuditID)
	q.term("correlator.process_id", f.ProcessID)
	q.window("@timestamp", f.Since, f.Until)
	return list(ctx, s, s.n.alerts, "event.id", q, f.Cursor, f.Limit, func(hits []hit) ([]store.Alert, error) {
		return decodeHits(hits, "alert", alertFromDoc)
	})
}
