package esdouble

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
)

var bulkOps = []string{"index", "create", "update", "delete"}

// bulk applies an NDJSON _bulk body item by item. Items fail on their own
// (errors:true, a status per item); the request fails whole only when the
// body is unreadable or a failure was injected.
func (d *Double) bulk(r *http.Request, defIndex string) (any, int, *esError) {
	if e := checkParams(r, "refresh", "timeout", "routing", "require_alias", "wait_for_active_shards",
		"_source", "_source_includes", "_source_excludes", "pipeline", "require_data_stream"); e != nil {
		return nil, 0, e
	}
	if ref := r.URL.Query().Get("refresh"); !slices.Contains([]string{"", "true", "false", "wait_for"}, ref) {
		return nil, 0, badRequest("[refresh] must be one of [true, false, wait_for], got [%s]", ref)
	}
	if p := r.URL.Query().Get("pipeline"); p != "" && p != "_none" {
		return nil, 0, badRequest("the double does not run ingest pipelines (pipeline=%s)", p)
	}
	d.mu.Lock()
	d.bulkRequests++
	if d.failRequests > 0 {
		d.failRequests--
		st := d.failStatus
		d.mu.Unlock()
		if st == http.StatusTooManyRequests {
			return nil, 0, errf(st, "es_rejected_execution_exception",
				"rejected execution of coordinating operation [shard_detail=[], coordinating_and_primary_bytes=0, replica_bytes=0, all_bytes=0, coordinating_operation_bytes=1, max_coordinating_and_primary_bytes=1]")
		}
		return nil, 0, errf(st, "injected_failure", "failure injected by the double")
	}
	d.mu.Unlock()

	sc := bufio.NewScanner(r.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 100<<20)
	var items []any
	hasErr := false
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var action map[string]map[string]any
		if err := json.Unmarshal(line, &action); err != nil || len(action) != 1 {
			return nil, 0, badRequest("Malformed action/metadata line [%d], expected START_OBJECT or END_OBJECT but found [%s]", len(items)+1, firstBytes(line))
		}
		var op string
		var meta map[string]any
		for k, v := range action {
			op, meta = k, v
		}
		if !slices.Contains(bulkOps, op) {
			return nil, 0, badRequest("Malformed action/metadata line [%d], expected one of [create, delete, index, update] but found [%s]", len(items)+1, op)
		}
		for k := range meta {
			if !slices.Contains([]string{"_index", "_id", "routing", "require_alias", "retry_on_conflict", "if_seq_no", "if_primary_term", "version", "version_type", "dynamic_templates", "pipeline"}, k) {
				return nil, 0, badRequest("Action/metadata line [%d] contains an unknown parameter [%s]", len(items)+1, k)
			}
		}
		var src []byte
		if op != "delete" {
			if !sc.Scan() {
				return nil, 0, badRequest("The bulk request must be terminated by a newline [\\n]")
			}
			src = slices.Clone(bytes.TrimSpace(sc.Bytes()))
		}
		idx, _ := meta["_index"].(string)
		if idx == "" {
			idx = defIndex
		}
		id, _ := meta["_id"].(string)
		if idx == "" {
			return nil, 0, errf(http.StatusBadRequest, "action_request_validation_exception", "Validation Failed: 1: index is missing;")
		}
		res := d.bulkItem(op, idx, id, src)
		if st, _ := res["status"].(int); st > 299 {
			hasErr = true
		}
		items = append(items, map[string]any{op: res})
	}
	if err := sc.Err(); err != nil {
		return nil, 0, badRequest("reading bulk body: %v", err)
	}
	if len(items) == 0 {
		return nil, 0, errf(http.StatusBadRequest, "action_request_validation_exception", "Validation Failed: 1: no requests added;")
	}
	return map[string]any{"took": 1, "errors": hasErr, "items": items}, http.StatusOK, nil
}

func firstBytes(b []byte) string {
	if len(b) > 40 {
		b = b[:40]
	}
	return string(b)
}

// bulkItem applies one bulk action, or fails it as injected, and returns
// its result object.
func (d *Double) bulkItem(op, target, id string, src []byte) map[string]any {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.bulkItems++
	d.itemCount++
	if d.itemFailEvery > 0 && d.itemCount%int64(d.itemFailEvery) == 0 {
		e := errf(d.itemFailStatus, d.itemFailType, "failure injected by the double into item %d", d.itemCount)
		return map[string]any{"_index": target, "_id": id, "status": e.status,
			"error": map[string]any{"type": e.typ, "reason": e.reason}}
	}
	return d.applyItem(op, target, id, src)
}

// applyItem applies one action (bulk's, or a single document's) with d.mu
// held and returns its result object.
func (d *Double) applyItem(op, target, id string, src []byte) map[string]any {
	fail := func(e *esError) map[string]any {
		return map[string]any{"_index": target, "_id": id, "status": e.status,
			"error": map[string]any{"type": e.typ, "reason": e.reason}}
	}
	_, isStream := d.dataStreams[target]
	ix := d.concrete(target)
	if ix == nil {
		if op == "update" || op == "delete" {
			return fail(errf(404, "index_not_found_exception", "no such index [%s]", target))
		}
		var e *esError
		if t := d.matchTemplate(target); t != nil && t.DataStream {
			ix, e = d.createDataStream(target)
			isStream = true
		} else {
			ix, e = newIndex(target, t, nil)
			if e == nil {
				d.indices[target] = ix
			}
		}
		if e != nil {
			return fail(e)
		}
	}
	if isStream && op != "create" {
		return fail(badRequest("only write ops with an op_type of create are allowed in data streams"))
	}
	if id == "" {
		if op != "index" && op != "create" {
			return fail(errf(400, "action_request_validation_exception", "Validation Failed: 1: id is missing;"))
		}
		d.autoID++
		id = fmt.Sprintf("esdouble-%d", d.autoID)
	}
	ok := func(status int, result string, version int64) map[string]any {
		return map[string]any{"_index": ix.name, "_id": id, "_version": version, "result": result,
			"status": status, "_seq_no": d.seq, "_primary_term": 1,
			"_shards": map[string]any{"total": 1, "successful": 1, "failed": 0}}
	}
	existing := ix.docs[id]
	switch op {
	case "delete":
		if existing == nil {
			return ok(404, "not_found", 1)
		}
		delete(ix.docs, id)
		return ok(200, "deleted", existing.version+1)
	case "update":
		var up struct {
			Doc         json.RawMessage `json:"doc"`
			DocAsUpsert bool            `json:"doc_as_upsert"`
		}
		if err := json.Unmarshal(src, &up); err != nil || len(up.Doc) == 0 {
			return fail(errf(400, "action_request_validation_exception", "Validation Failed: 1: script or doc is missing;"))
		}
		if existing == nil && !up.DocAsUpsert {
			return fail(errf(404, "document_missing_exception", "[%s]: document missing", id))
		}
		if existing != nil {
			merged := mergeObjects(existing.src, decodeObject(up.Doc))
			src, _ = json.Marshal(merged)
		} else {
			src = up.Doc
		}
	case "create":
		if existing != nil {
			return fail(errf(409, "version_conflict_engine_exception",
				"[%s]: version conflict, document already exists (current version [%d])", id, existing.version))
		}
	}
	obj := decodeObject(src)
	if obj == nil {
		return fail(errf(400, "document_parsing_exception", "[1:1] failed to parse: source is not a JSON object"))
	}
	if isStream && len(values(obj, "@timestamp")) == 0 {
		return fail(errf(400, "document_parsing_exception", "data stream timestamp field [@timestamp] is missing"))
	}
	if e := ix.admit(obj); e != nil {
		return fail(e)
	}
	d.seq++
	nd := &doc{id: id, seq: d.seq, version: 1, raw: json.RawMessage(src), src: obj}
	if existing != nil {
		nd.version = existing.version + 1 // and a new seq: Lucene updates are delete+add
	}
	ix.docs[id] = nd
	if existing != nil {
		return ok(200, "updated", nd.version)
	}
	return ok(201, "created", 1)
}

func decodeObject(b []byte) map[string]any {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var m map[string]any
	if dec.Decode(&m) != nil || dec.More() {
		return nil
	}
	return m
}

// mergeObjects applies a partial update doc the way update's doc does:
// objects merge recursively, everything else is replaced.
func mergeObjects(dst, patch map[string]any) map[string]any {
	out := make(map[string]any, len(dst))
	for k, v := range dst {
		out[k] = v
	}
	for k, v := range patch {
		if pm, ok := v.(map[string]any); ok {
			if dm, ok := out[k].(map[string]any); ok {
				out[k] = mergeObjects(dm, pm)
				continue
			}
		}
		out[k] = v
	}
	return out
}
