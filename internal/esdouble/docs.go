package esdouble

import (
	"io"
	"net/http"
	"slices"
)

func (d *Double) getDoc(r *http.Request, name, id string) (any, int, *esError) {
	if e := checkParams(r, "realtime", "refresh", "routing", "preference", "_source"); e != nil {
		return nil, 0, e
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	ix := d.indices[name]
	if ix == nil {
		return nil, 0, errf(http.StatusNotFound, "index_not_found_exception", "no such index [%s]", name)
	}
	dc := ix.docs[id]
	if dc == nil {
		return map[string]any{"_index": name, "_id": id, "found": false}, http.StatusNotFound, nil
	}
	return map[string]any{"_index": name, "_id": id, "_version": dc.version, "_seq_no": dc.seq,
		"_primary_term": 1, "found": true, "_source": dc.raw}, http.StatusOK, nil
}

// putDoc indexes one document (PUT or POST /<index>/_doc/<id>), creating
// it only with op_type=create. Failures injected into bulk items do not
// touch it: they stand for a loaded cluster rejecting bulk work.
func (d *Double) putDoc(r *http.Request, name, id string) (any, int, *esError) {
	if e := checkParams(r, "op_type", "refresh", "routing", "timeout", "wait_for_active_shards"); e != nil {
		return nil, 0, e
	}
	op := r.URL.Query().Get("op_type")
	if !slices.Contains([]string{"", "index", "create"}, op) {
		return nil, 0, badRequest("opType must be 'create' or 'index', found: [%s]", op)
	}
	if op == "" {
		op = "index"
	}
	src, err := io.ReadAll(r.Body)
	if err != nil {
		return nil, 0, badRequest("reading body: %v", err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	res := d.applyItem(op, name, id, src)
	st, _ := res["status"].(int)
	if eo, ok := res["error"].(map[string]any); ok {
		typ, _ := eo["type"].(string)
		reason, _ := eo["reason"].(string)
		return nil, 0, errf(st, typ, "%s", reason)
	}
	delete(res, "status")
	return res, st, nil
}

func (d *Double) refresh(r *http.Request, target string) (any, *esError) {
	if e := checkParams(r, "ignore_unavailable", "allow_no_indices", "expand_wildcards"); e != nil {
		return nil, e
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	ixs, e := d.resolveFor(r, target)
	if e != nil {
		return nil, e
	}
	n := len(ixs)
	return map[string]any{"_shards": map[string]any{"total": n, "successful": n, "failed": 0}}, nil
}

func (d *Double) deleteByQuery(r *http.Request, target string) (any, *esError) {
	if e := checkParams(r, "refresh", "conflicts", "slices", "wait_for_completion", "scroll_size",
		"ignore_unavailable", "allow_no_indices", "expand_wildcards", "requests_per_second", "timeout",
		"max_docs"); e != nil {
		return nil, e
	}
	if c := r.URL.Query().Get("conflicts"); c != "" && c != "abort" && c != "proceed" {
		return nil, badRequest("conflicts may only be \"proceed\" or \"abort\" but was [%s]", c)
	}
	if r.URL.Query().Get("wait_for_completion") == "false" {
		return nil, badRequest("the double does not implement tasks (wait_for_completion=false)")
	}
	var body map[string]any
	if e := decodeBody(r, &body); e != nil {
		return nil, e
	}
	if e := knownKeys("delete_by_query", body, "query", "max_docs"); e != nil {
		return nil, e
	}
	if _, ok := body["query"]; !ok {
		return nil, errf(http.StatusBadRequest, "action_request_validation_exception", "Validation Failed: 1: query is missing;")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	hits, e := d.matching(r, target, body["query"], nil)
	if e != nil {
		return nil, e
	}
	if v, ok := body["max_docs"]; ok {
		n, _ := toFloat(v)
		hits = hits[:min(int(n), len(hits))]
	}
	for _, h := range hits {
		delete(h.ix.docs, h.d.id)
	}
	return map[string]any{"took": 1, "timed_out": false, "total": len(hits), "deleted": len(hits),
		"batches": 1, "version_conflicts": 0, "noops": 0,
		"retries":          map[string]any{"bulk": 0, "search": 0},
		"throttled_millis": 0, "requests_per_second": -1.0, "throttled_until_millis": 0,
		"failures": []any{}}, nil
}
