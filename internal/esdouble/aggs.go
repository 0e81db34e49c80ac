package esdouble

import (
	"net/http"
	"slices"
	"time"
)

// aggregate computes the aggregations the double knows: terms (with an
// include list), top_hits, min and max.
func aggregate(body any, hits []hit) (map[string]any, *esError) {
	obj, ok := body.(map[string]any)
	if !ok {
		return nil, parsingError("[aggs] must be an object")
	}
	out := map[string]any{}
	for name, def := range obj {
		dm, ok := def.(map[string]any)
		if !ok {
			return nil, parsingError("[%s] aggregation must be an object", name)
		}
		var sub any
		var kind string
		var spec map[string]any
		for k, v := range dm {
			switch k {
			case "aggs", "aggregations":
				sub = v
			default:
				if kind != "" {
					return nil, parsingError("Found two aggregation type definitions in [%s]: [%s] and [%s]", name, kind, k)
				}
				kind = k
				spec, _ = v.(map[string]any)
			}
		}
		var res map[string]any
		var e *esError
		switch kind {
		case "terms":
			res, e = termsAgg(spec, sub, hits)
		case "top_hits":
			if sub != nil {
				return nil, badRequest("Aggregator [%s] of type [top_hits] cannot accept sub-aggregations", name)
			}
			res, e = topHitsAgg(spec, hits)
		case "min", "max":
			res, e = minMaxAgg(kind, spec, hits)
		default:
			return nil, parsingError("Unknown aggregation type [%s] (or the double does not implement it)", kind)
		}
		if e != nil {
			return nil, e
		}
		out[name] = res
	}
	return out, nil
}

func aggField(kind string, spec map[string]any, hits []hit) (string, *esError) {
	name, _ := spec["field"].(string)
	if name == "" {
		return "", parsingError("Required [field] for [%s]", kind)
	}
	for _, h := range hits {
		if f, ok := h.ix.fields[name]; ok && (f.typ == "text" || f.typ == "match_only_text") {
			return "", badRequest("Fielddata is disabled on [%s]. Text fields are not optimised for aggregations", name)
		}
	}
	return name, nil
}

func termsAgg(spec map[string]any, sub any, hits []hit) (map[string]any, *esError) {
	if e := knownKeys("terms", spec, "field", "size", "include"); e != nil {
		return nil, e
	}
	name, e := aggField("terms", spec, hits)
	if e != nil {
		return nil, e
	}
	size := 10
	if v, ok := spec["size"]; ok {
		n, err := toFloat(v)
		if err != nil || n < 1 {
			return nil, parsingError("[size] must be greater than 0")
		}
		size = int(n)
	}
	var include map[string]bool
	if v, ok := spec["include"]; ok {
		arr, ok := v.([]any)
		if !ok {
			return nil, parsingError("the double implements terms include only as an array of values")
		}
		include = map[string]bool{}
		for _, x := range arr {
			s, _ := x.(string)
			include[s] = true
		}
	}
	type bucket struct {
		key  sortKey
		wire any
		hits []hit
	}
	byKey := map[sortKey]*bucket{}
	for _, h := range hits {
		f, ok := h.ix.fields[name]
		if !ok {
			continue
		}
		seen := map[sortKey]bool{}
		for _, v := range values(h.d.src, f.source) {
			k, err := keyOf(f, v)
			if err != nil || seen[k] || (include != nil && !include[k.str]) {
				continue
			}
			seen[k] = true
			b := byKey[k]
			if b == nil {
				b = &bucket{key: k, wire: k.wire(f)}
				byKey[k] = b
			}
			b.hits = append(b.hits, h)
		}
	}
	var buckets []*bucket
	for _, b := range byKey {
		buckets = append(buckets, b)
	}
	slices.SortFunc(buckets, func(a, b *bucket) int {
		if c := cmpOrdered(int64(len(b.hits)), int64(len(a.hits))); c != 0 {
			return c
		}
		return a.key.cmp(b.key)
	})
	other := 0
	if len(buckets) > size {
		for _, b := range buckets[size:] {
			other += len(b.hits)
		}
		buckets = buckets[:size]
	}
	out := make([]any, 0, len(buckets))
	for _, b := range buckets {
		bm := map[string]any{"key": b.wire, "doc_count": len(b.hits)}
		if sub != nil {
			res, e := aggregate(sub, b.hits)
			if e != nil {
				return nil, e
			}
			for k, v := range res {
				bm[k] = v
			}
		}
		out = append(out, bm)
	}
	return map[string]any{"doc_count_error_upper_bound": 0, "sum_other_doc_count": other, "buckets": out}, nil
}

func topHitsAgg(spec map[string]any, hits []hit) (map[string]any, *esError) {
	if e := knownKeys("top_hits", spec, "size", "sort", "_source", "from"); e != nil {
		return nil, e
	}
	size := 3
	if v, ok := spec["size"]; ok {
		n, err := toFloat(v)
		if err != nil || n < 0 || n > 100 {
			return nil, badRequest("Top hits result window is too large, the top hits aggregator [size] must be less than or equal to: [100]")
		}
		size = int(n)
	}
	sorts, e := parseSort(spec["sort"])
	if e != nil {
		return nil, e
	}
	incl, e := parseSourceFilter(spec["_source"])
	if e != nil {
		return nil, e
	}
	sorted := make([]hit, 0, len(hits))
	for _, h := range hits {
		fields, e := h.ix.sortFields(sorts)
		if e != nil {
			return nil, e
		}
		sorted = append(sorted, hit{ix: h.ix, d: h.d, keys: docKeys(h.d, sorts, fields)})
	}
	slices.SortStableFunc(sorted, func(a, b hit) int { return compareKeys(a.keys, b.keys, sorts) })
	page := sorted[:min(size, len(sorted))]
	return map[string]any{"hits": map[string]any{
		"total": map[string]any{"value": len(hits), "relation": "eq"}, "max_score": nil,
		"hits": renderHits(page, sorts, incl),
	}}, nil
}

func minMaxAgg(kind string, spec map[string]any, hits []hit) (map[string]any, *esError) {
	if e := knownKeys(kind, spec, "field"); e != nil {
		return nil, e
	}
	name, e := aggField(kind, spec, hits)
	if e != nil {
		return nil, e
	}
	var best *sortKey
	var bf field
	for _, h := range hits {
		f, ok := h.ix.fields[name]
		if !ok {
			continue
		}
		for _, v := range values(h.d.src, f.source) {
			k, err := keyOf(f, v)
			if err != nil {
				continue
			}
			if best == nil || (kind == "min" && k.cmp(*best) < 0) || (kind == "max" && k.cmp(*best) > 0) {
				kk := k
				best, bf = &kk, f
			}
		}
	}
	if best == nil {
		return map[string]any{"value": nil}, nil
	}
	// Elasticsearch answers min and max as doubles; dates in epoch millis.
	switch {
	case bf.typ == "date" || bf.typ == "date_nanos":
		ms := float64(best.i / int64(time.Millisecond))
		return map[string]any{"value": ms, "value_as_string": time.Unix(0, best.i).UTC().Format("2006-01-02T15:04:05.000Z")}, nil
	case best.kind == 'i':
		return map[string]any{"value": float64(best.i)}, nil
	case best.kind == 'n':
		return map[string]any{"value": best.num}, nil
	}
	return nil, errf(http.StatusBadRequest, "illegal_argument_exception", "Field [%s] of type [%s] is not supported for aggregation [%s]", name, bf.typ, kind)
}
