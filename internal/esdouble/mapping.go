package esdouble

import (
	"net/http"
	"slices"
	"strings"
)

// mapping serves GET and PUT /<target>/_mapping (and GET /_mapping).
func (d *Double) mapping(r *http.Request, target string) (any, *esError) {
	switch r.Method {
	case http.MethodGet:
		return d.getMapping(r, target)
	case http.MethodPut, http.MethodPost:
		return d.putMapping(r, target)
	}
	return nil, badRequest("method %s on mapping", r.Method)
}

// getMapping answers each concrete index's mappings as they stand: its
// template's and creation body's, with every accepted update merged in. A
// data stream answers with its backing index, as Elasticsearch does.
func (d *Double) getMapping(r *http.Request, target string) (any, *esError) {
	if e := checkParams(r, "ignore_unavailable", "allow_no_indices", "expand_wildcards", "master_timeout", "local"); e != nil {
		return nil, e
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	ixs, e := d.resolveFor(r, target)
	if e != nil {
		return nil, e
	}
	out := map[string]any{}
	for _, ix := range ixs {
		out[ix.name] = map[string]any{"mappings": cloneJSON(ix.mappings)}
	}
	return out, nil
}

// putMapping updates the mappings of every index target resolves to (a
// data stream's backing index included), as Elasticsearch does: new
// fields and objects are added, dynamic may change, and an existing field
// keeps its type and parameters (a change is a 400 and updates no index).
// Stored documents are not reindexed; a field added here is empty in
// them. Like Elasticsearch's, a target that matches nothing is a 404.
func (d *Double) putMapping(r *http.Request, target string) (any, *esError) {
	if e := checkParams(r, "write_index_only", "ignore_unavailable", "allow_no_indices", "expand_wildcards",
		"master_timeout", "timeout"); e != nil {
		return nil, e
	}
	if r.URL.Query().Get("write_index_only") == "true" {
		return nil, badRequest("the double does not implement write_index_only (it never rolls over)")
	}
	var body map[string]any
	if e := decodeBody(r, &body); e != nil {
		return nil, e
	}
	cm, err := compileMappings(body)
	if err != nil {
		return nil, errf(http.StatusBadRequest, "mapper_parsing_exception", "%v", err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	ixs, e := d.resolveFor(r, target)
	if e != nil {
		return nil, e
	}
	if len(ixs) == 0 {
		return nil, errf(http.StatusNotFound, "index_not_found_exception", "no such index [%s]", target)
	}
	for _, ix := range ixs {
		if e := ix.checkMerge(cm); e != nil {
			return nil, e
		}
	}
	for _, ix := range ixs {
		ix.merge(cm, body)
	}
	return map[string]any{"acknowledged": true}, nil
}

// checkMerge reports the first conflict between the index's mappings and
// the update cm, in Elasticsearch's words.
func (ix *index) checkMerge(cm compiled) *esError {
	conflict := func(format string, args ...any) *esError {
		return badRequest(format, args...)
	}
	for p, nf := range cm.fields {
		if of, ok := ix.fields[p]; ok {
			if of.typ != nf.typ {
				return conflict("mapper [%s] cannot be changed from type [%s] to [%s]", p, of.typ, nf.typ)
			}
			if of.index != nf.index {
				return conflict("Mapper for [%s] conflicts with existing mapper:\n\tCannot update parameter [index] from [%t] to [%t]",
					p, of.index, nf.index)
			}
			continue
		}
		if nf.source != p {
			continue // a multi-field beside its parent, checked with it
		}
		for op, of := range ix.fields {
			if of.source == op && strings.HasPrefix(p, op+".") {
				return conflict("can't merge a non object mapping [%s] with an object mapping", op)
			}
			if of.source == op && strings.HasPrefix(op, p+".") {
				return conflict("can't merge a non object mapping [%s] with an object mapping", p)
			}
		}
		for _, dp := range ix.disabled {
			if p == dp {
				return conflict("can't merge a non object mapping [%s] with an object mapping", p)
			}
			if strings.HasPrefix(p, dp+".") {
				return conflict("the double does not implement properties under the disabled object [%s]", dp)
			}
		}
	}
	for _, dp := range cm.disabled {
		if slices.Contains(ix.disabled, dp) {
			continue
		}
		for op := range ix.fields {
			if op == dp {
				return conflict("can't merge a non object mapping [%s] with an object mapping", dp)
			}
			if strings.HasPrefix(op, dp+".") {
				return conflict("the [enabled] parameter can't be updated for the object mapping [%s]", dp)
			}
		}
	}
	return nil
}

// merge applies an update checkMerge accepted; body is its source, kept
// for GET _mapping.
func (ix *index) merge(cm compiled, body map[string]any) {
	for p, f := range cm.fields {
		ix.fields[p] = f
	}
	for _, dp := range cm.disabled {
		if !slices.Contains(ix.disabled, dp) {
			ix.disabled = append(ix.disabled, dp)
		}
	}
	if _, ok := body["dynamic"]; ok {
		ix.strict = cm.strict
	}
	mergeMappings(ix.mappings, body)
}

// mergeMappings merges the mapping src into dst: properties recursively,
// any other key replaced. dst holds its own copies of src's values.
func mergeMappings(dst, src map[string]any) {
	for k, v := range src {
		if k != "properties" {
			dst[k] = cloneJSON(v)
			continue
		}
		sp, _ := v.(map[string]any)
		dp, ok := dst["properties"].(map[string]any)
		if !ok {
			dp = map[string]any{}
			dst["properties"] = dp
		}
		for name, def := range sp {
			sd, _ := def.(map[string]any)
			dd, ok := dp[name].(map[string]any)
			if !ok || sd == nil {
				dp[name] = cloneJSON(def)
				continue
			}
			mergeMappings(dd, sd)
		}
	}
}

// cloneJSON deep-copies decoded JSON.
func cloneJSON(v any) any {
	switch x := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[k] = cloneJSON(e)
		}
		return m
	case []any:
		s := make([]any, len(x))
		for i, e := range x {
			s[i] = cloneJSON(e)
		}
		return s
	}
	return v
}
