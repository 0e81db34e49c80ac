package esdouble

import (
	"net/http"
	"slices"
	"strconv"
	"strings"
)

const maxResultWindow = 10000

type sortSpec struct {
	field        string
	desc         bool
	doc          bool // _doc: index order
	unmappedType string
}

type hit struct {
	ix   *index
	d    *doc
	keys []sortKey
}

var searchParams = []string{"size", "from", "ignore_unavailable", "allow_no_indices", "expand_wildcards",
	"track_total_hits", "typed_keys", "search_type", "request_cache", "preference", "timeout",
	"seq_no_primary_term", "version", "routing", "allow_partial_search_results", "rest_total_hits_as_int"}

func (d *Double) search(r *http.Request, target string) (any, *esError) {
	if e := checkParams(r, searchParams...); e != nil {
		return nil, e
	}
	body := map[string]any{}
	if r.ContentLength != 0 {
		if e := decodeBody(r, &body); e != nil {
			return nil, e
		}
	}
	if e := knownKeys("search", body, "query", "sort", "size", "from", "search_after", "track_total_hits",
		"_source", "aggs", "aggregations", "timeout", "seq_no_primary_term", "version"); e != nil {
		return nil, e
	}
	size, from := 10, 0
	for key, dst := range map[string]*int{"size": &size, "from": &from} {
		if v, ok := body[key]; ok {
			n, err := toFloat(v)
			if err != nil || n < 0 {
				return nil, parsingError("[%s] must be a non-negative integer", key)
			}
			*dst = int(n)
		}
		if v := r.URL.Query().Get(key); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				return nil, badRequest("[%s] must be a non-negative integer", key)
			}
			*dst = n
		}
	}
	if from+size > maxResultWindow {
		return nil, badRequest("Result window is too large, from + size must be less than or equal to: [%d] but was [%d]. See the scroll api for a more efficient way to request large data sets.", maxResultWindow, from+size)
	}
	sorts, e := parseSort(body["sort"])
	if e != nil {
		return nil, e
	}
	after, hasAfter := body["search_after"].([]any)
	if hasAfter && from > 0 {
		return nil, badRequest("`from` parameter must be set to 0 when `search_after` is used.")
	}
	if hasAfter && len(after) != len(sorts) {
		return nil, badRequest("search_after has %d value(s) but sort has %d.", len(after), len(sorts))
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.searchRequests++
	hits, e := d.matching(r, target, body["query"], sorts)
	if e != nil {
		return nil, e
	}
	total := len(hits)
	if hasAfter {
		ak, e := afterKeys(hits, sorts, after)
		if e != nil {
			return nil, e
		}
		hits = slices.DeleteFunc(hits, func(h hit) bool { return compareKeys(h.keys, ak, sorts) <= 0 })
	}
	page := hits[min(from, len(hits)):min(from+size, len(hits))]
	incl, e := parseSourceFilter(body["_source"])
	if e != nil {
		return nil, e
	}
	out := map[string]any{
		"took": 1, "timed_out": false,
		"_shards": map[string]any{"total": 1, "successful": 1, "skipped": 0, "failed": 0},
		"hits": map[string]any{"total": map[string]any{"value": total, "relation": "eq"},
			"max_score": nil, "hits": renderHits(page, sorts, incl)},
	}
	aggsBody := body["aggs"]
	if aggsBody == nil {
		aggsBody = body["aggregations"]
	}
	if aggsBody != nil {
		all, _ := d.matching(r, target, body["query"], nil)
		res, e := aggregate(aggsBody, all)
		if e != nil {
			return nil, e
		}
		out["aggregations"] = res
	}
	return out, nil
}

// matching runs query over target's indices and sorts the hits.
func (d *Double) matching(r *http.Request, target string, query any, sorts []sortSpec) ([]hit, *esError) {
	ixs, e := d.resolveFor(r, target)
	if e != nil {
		return nil, e
	}
	var hits []hit
	for _, ix := range ixs {
		m, e := ix.compileQuery(query)
		if e != nil {
			return nil, e
		}
		fields, e := ix.sortFields(sorts)
		if e != nil {
			return nil, e
		}
		for _, dc := range ix.docs {
			if m(dc) {
				hits = append(hits, hit{ix: ix, d: dc, keys: docKeys(dc, sorts, fields)})
			}
		}
	}
	slices.SortFunc(hits, func(a, b hit) int {
		if c := compareKeys(a.keys, b.keys, sorts); c != 0 {
			return c
		}
		if c := strings.Compare(a.ix.name, b.ix.name); c != 0 {
			return c
		}
		return cmpOrdered(a.d.seq, b.d.seq)
	})
	return hits, nil
}

func (d *Double) resolveFor(r *http.Request, target string) ([]*index, *esError) {
	if r.URL.Query().Get("ignore_unavailable") != "true" {
		return d.resolve(target)
	}
	var out []*index
	for _, t := range strings.Split(target, ",") {
		ixs, e := d.resolve(t)
		if e == nil {
			out = append(out, ixs...)
		}
	}
	return out, nil
}

func parseSort(v any) ([]sortSpec, *esError) {
	var out []sortSpec
	for _, s := range clauses(v) {
		switch x := s.(type) {
		case string:
			out = append(out, sortSpec{field: x, doc: x == "_doc"})
		case map[string]any:
			if len(x) != 1 {
				return nil, parsingError("[sort] each sort object must hold one field")
			}
			for f, o := range x {
				sp := sortSpec{field: f, doc: f == "_doc"}
				switch ov := o.(type) {
				case string:
					sp.desc = ov == "desc"
					if ov != "asc" && ov != "desc" {
						return nil, parsingError("unknown sort order [%s]", ov)
					}
				case map[string]any:
					if e := knownKeys("sort", ov, "order", "unmapped_type", "missing", "format", "mode", "numeric_type"); e != nil {
						return nil, e
					}
					ord, _ := ov["order"].(string)
					sp.desc = ord == "desc"
					sp.unmappedType, _ = ov["unmapped_type"].(string)
					if m, ok := ov["missing"]; ok && m != "_last" {
						return nil, parsingError("the double only implements missing: _last")
					}
					if m, ok := ov["mode"]; ok {
						return nil, parsingError("the double does not implement sort mode [%v]", m)
					}
				default:
					return nil, parsingError("[sort] malformed for [%s]", f)
				}
				out = append(out, sp)
			}
		default:
			return nil, parsingError("[sort] malformed")
		}
	}
	for _, s := range out {
		if s.field == "_score" {
			return nil, parsingError("the double does not score; sort on fields")
		}
	}
	return out, nil
}

func (ix *index) sortFields(sorts []sortSpec) ([]field, *esError) {
	out := make([]field, len(sorts))
	for i, s := range sorts {
		if s.doc {
			continue
		}
		f, ok := ix.fields[s.field]
		switch {
		case !ok && s.unmappedType != "":
			f = field{typ: s.unmappedType, source: "\x00unmapped"}
		case !ok:
			return nil, errf(http.StatusBadRequest, "query_shard_exception", "No mapping found for [%s] in order to sort on", s.field)
		case f.typ == "text" || f.typ == "match_only_text":
			return nil, badRequest("Fielddata is disabled on [%s] in [%s]. Text fields are not optimised for operations that require per-document field data like aggregations and sorting", s.field, ix.name)
		}
		out[i] = f
	}
	return out, nil
}

// docKeys picks a document's sort key per spec: the smallest value
// ascending, the largest descending, as Elasticsearch's default mode.
func docKeys(dc *doc, sorts []sortSpec, fields []field) []sortKey {
	keys := make([]sortKey, len(sorts))
	for i, s := range sorts {
		if s.doc {
			keys[i] = sortKey{i: dc.seq, kind: 'i'}
			continue
		}
		k := sortKey{missing: true}
		for _, v := range values(dc.src, fields[i].source) {
			vk, err := keyOf(fields[i], v)
			if err != nil {
				continue
			}
			if k.missing || (!s.desc && vk.cmp(k) < 0) || (s.desc && vk.cmp(k) > 0) {
				k = vk
			}
		}
		if !k.missing && (fields[i].typ == "date") {
			k.i = k.i / 1e6 * 1e6
		}
		keys[i] = k
	}
	return keys
}

// compareKeys orders two key tuples by the specs; missing values sort last
// whatever the direction.
func compareKeys(a, b []sortKey, sorts []sortSpec) int {
	for i, s := range sorts {
		c := a[i].cmp(b[i])
		if s.desc && !a[i].missing && !b[i].missing {
			c = -c
		}
		if c != 0 {
			return c
		}
	}
	return 0
}

func afterKeys(hits []hit, sorts []sortSpec, after []any) ([]sortKey, *esError) {
	out := make([]sortKey, len(sorts))
	for i, s := range sorts {
		f := field{typ: "keyword"}
		if s.doc {
			f = field{typ: "long"}
		}
		for _, h := range hits {
			if hf, ok := h.ix.fields[s.field]; ok {
				f = hf
				break
			}
		}
		k, err := fromWire(f, after[i])
		if err != nil {
			return nil, badRequest("Failed to parse search_after value for field [%s]: %v", s.field, err)
		}
		out[i] = k
	}
	return out, nil
}

func renderHits(hits []hit, sorts []sortSpec, incl []string) []any {
	out := make([]any, 0, len(hits))
	for _, h := range hits {
		hm := map[string]any{"_index": h.ix.name, "_id": h.d.id, "_score": nil}
		if incl == nil {
			hm["_source"] = h.d.raw
		} else if len(incl) > 0 {
			hm["_source"] = filterSource(h.d.src, incl)
		}
		if len(sorts) > 0 {
			fields, _ := h.ix.sortFields(sorts)
			sv := make([]any, len(sorts))
			for i, k := range h.keys {
				sv[i] = k.wire(fields[i])
			}
			hm["sort"] = sv
		}
		out = append(out, hm)
	}
	return out
}

// parseSourceFilter reads _source: nil means the whole source, an empty
// list none, else the included paths.
func parseSourceFilter(v any) ([]string, *esError) {
	switch x := v.(type) {
	case nil:
		return nil, nil
	case bool:
		if x {
			return nil, nil
		}
		return []string{}, nil
	case string:
		return []string{x}, nil
	case []any:
		out := []string{}
		for _, p := range x {
			s, _ := p.(string)
			if strings.Contains(s, "*") {
				return nil, parsingError("the double does not implement wildcard _source filters")
			}
			out = append(out, s)
		}
		return out, nil
	}
	return nil, parsingError("the double reads _source only as a bool or a list of paths")
}

// filterSource keeps the included dotted paths, as nested objects.
func filterSource(src map[string]any, incl []string) map[string]any {
	out := map[string]any{}
	for _, p := range incl {
		vals := values(src, p)
		if len(vals) == 0 {
			continue
		}
		var v any = vals[0]
		if len(vals) > 1 {
			v = vals
		}
		m := out
		parts := strings.Split(p, ".")
		for _, part := range parts[:len(parts)-1] {
			sub, ok := m[part].(map[string]any)
			if !ok {
				sub = map[string]any{}
				m[part] = sub
			}
			m = sub
		}
		m[parts[len(parts)-1]] = v
	}
	return out
}
