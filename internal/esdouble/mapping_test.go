package esdouble

import (
	"strings"
	"testing"
)

const strictIndex = `{"mappings":{"dynamic":"strict","properties":{
	"name":{"type":"keyword"},"raw":{"type":"keyword","index":false},
	"obj":{"properties":{"n":{"type":"long"}}},"blob":{"type":"object","enabled":false}}}}`

// bulkItem indexes one document into index and answers the item's status
// and error type.
func bulkItem(t *testing.T, d *Double, index, id, src string) (float64, string) {
	t.Helper()
	_, res := call(t, d, "POST", "/_bulk", bulkBody(`{"index":{"_index":"`+index+`","_id":"`+id+`"}}`, src))
	it := res["items"].([]any)[0].(map[string]any)["index"].(map[string]any)
	return it["status"].(float64), errType(it)
}

// properties digs the properties at path (dotted) out of a GET _mapping
// answer for index.
func properties(t *testing.T, res map[string]any, index, path string) map[string]any {
	t.Helper()
	ix, _ := res[index].(map[string]any)
	m, _ := ix["mappings"].(map[string]any)
	props, _ := m["properties"].(map[string]any)
	for _, p := range strings.Split(path, ".") {
		if p == "" {
			continue
		}
		o, _ := props[p].(map[string]any)
		props, _ = o["properties"].(map[string]any)
	}
	if props == nil {
		t.Fatalf("no properties at %q in %v", path, res)
	}
	return props
}

func TestPutMappingAddsFields(t *testing.T) {
	d := New(t)
	if st, res := call(t, d, "PUT", "/m", strictIndex); st != 200 {
		t.Fatalf("creating index: %d %v", st, res)
	}
	const newDoc = `{"name":"a","added":"x","obj":{"m":"y"},"meta":{"anything":[1,{"k":"v"}]}}`
	if st, typ := bulkItem(t, d, "m", "1", newDoc); st != 400 || typ != "strict_dynamic_mapping_exception" {
		t.Fatalf("new fields before the update: %v %q", st, typ)
	}
	st, res := call(t, d, "PUT", "/m/_mapping", `{"dynamic":"strict","properties":{
		"name":{"type":"keyword"},"added":{"type":"keyword"},
		"obj":{"properties":{"m":{"type":"keyword"}}},"meta":{"type":"object","enabled":false}}}`)
	if st != 200 || res["acknowledged"] != true {
		t.Fatalf("PUT _mapping: %d %v", st, res)
	}
	if st, typ := bulkItem(t, d, "m", "1", newDoc); st != 201 {
		t.Fatalf("new fields after the update: %v %q", st, typ)
	}
	if _, res := call(t, d, "POST", "/m/_search", `{"query":{"term":{"obj.m":"y"}}}`); strings.Join(ids(res), ",") != "1" {
		t.Fatalf("search on an added field: %v", res)
	}
	if st, typ := bulkItem(t, d, "m", "2", `{"name":"b","unknown":1}`); st != 400 || typ != "strict_dynamic_mapping_exception" {
		t.Fatalf("still strict: %v %q", st, typ)
	}

	st, res = call(t, d, "GET", "/m/_mapping", "")
	if st != 200 {
		t.Fatalf("GET _mapping: %d %v", st, res)
	}
	if m := res["m"].(map[string]any)["mappings"].(map[string]any); m["dynamic"] != "strict" {
		t.Errorf("dynamic = %v", m["dynamic"])
	}
	root := properties(t, res, "m", "")
	for _, f := range []string{"name", "raw", "added", "blob", "meta"} {
		if root[f] == nil {
			t.Errorf("GET _mapping lacks %s: %v", f, root)
		}
	}
	if obj := properties(t, res, "m", "obj"); obj["n"] == nil || obj["m"] == nil {
		t.Errorf("obj keeps n and gains m: %v", obj)
	}
}

func TestPutMappingConflicts(t *testing.T) {
	d := New(t)
	call(t, d, "PUT", "/m", strictIndex)
	cases := []struct {
		name, path, body string
		status           int
		typ              string
	}{
		{"type change", "/m/_mapping", `{"properties":{"name":{"type":"long"}}}`, 400, "illegal_argument_exception"},
		{"index change", "/m/_mapping", `{"properties":{"raw":{"type":"keyword","index":true}}}`, 400, "illegal_argument_exception"},
		{"leaf over object", "/m/_mapping", `{"properties":{"obj":{"type":"keyword"}}}`, 400, "illegal_argument_exception"},
		{"object over leaf", "/m/_mapping", `{"properties":{"name":{"properties":{"x":{"type":"long"}}}}}`, 400, "illegal_argument_exception"},
		{"enable a disabled object", "/m/_mapping", `{"properties":{"blob":{"properties":{"x":{"type":"long"}}}}}`, 400, "illegal_argument_exception"},
		{"disable an object", "/m/_mapping", `{"properties":{"obj":{"type":"object","enabled":false}}}`, 400, "illegal_argument_exception"},
		{"unknown type", "/m/_mapping", `{"properties":{"x":{"type":"nope"}}}`, 400, "mapper_parsing_exception"},
		{"unknown root key", "/m/_mapping", `{"propertys":{}}`, 400, "mapper_parsing_exception"},
		{"unknown parameter", "/m/_mapping?bogus=1", `{"properties":{}}`, 400, "illegal_argument_exception"},
		{"missing index", "/nope/_mapping", `{"properties":{}}`, 404, "index_not_found_exception"},
		{"wildcard matching nothing", "/nope-*/_mapping", `{"properties":{}}`, 404, "index_not_found_exception"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st, res := call(t, d, "PUT", c.path, c.body)
			if st != c.status || errType(res) != c.typ {
				t.Fatalf("got %d %q, want %d %q (%v)", st, errType(res), c.status, c.typ, res)
			}
		})
	}
	// A refused update changes no index, even its acceptable part.
	call(t, d, "PUT", "/n", strictIndex)
	st, _ := call(t, d, "PUT", "/m,n/_mapping", `{"properties":{"fresh":{"type":"keyword"},"name":{"type":"long"}}}`)
	if st != 400 {
		t.Fatalf("conflicting update on two indices: %d", st)
	}
	if st, typ := bulkItem(t, d, "m", "1", `{"fresh":"x"}`); st != 400 || typ != "strict_dynamic_mapping_exception" {
		t.Fatalf("half of a refused update applied: %v %q", st, typ)
	}
}

func TestPutMappingTemplatesAndDataStreams(t *testing.T) {
	d := setup(t)
	call(t, d, "PUT", "/t-a", "")
	if st, res := call(t, d, "PUT", "/t-*/_mapping", `{"properties":{"added":{"type":"keyword"}}}`); st != 200 {
		t.Fatalf("PUT _mapping on a wildcard: %d %v", st, res)
	}
	call(t, d, "PUT", "/t-b", "")
	_, res := call(t, d, "GET", "/t-*/_mapping", "")
	if properties(t, res, "t-a", "")["added"] == nil {
		t.Errorf("t-a lacks the added field: %v", res)
	}
	if properties(t, res, "t-b", "")["added"] != nil {
		t.Errorf("an index update leaked into the template: t-b has it: %v", res)
	}

	call(t, d, "PUT", "/_index_template/ds", `{"index_patterns":["logs-x-*"],"data_stream":{},"priority":200,
		"template":{"mappings":{"dynamic":"strict","properties":{"@timestamp":{"type":"date"},"k":{"type":"keyword"}}}}}`)
	call(t, d, "PUT", "/_data_stream/logs-x-default", "")
	doc := `{"@timestamp":"2026-01-01T00:00:00Z","k":"a","j":"b"}`
	create := func() float64 {
		_, res := call(t, d, "POST", "/_bulk", bulkBody(`{"create":{"_index":"logs-x-default"}}`, doc))
		return res["items"].([]any)[0].(map[string]any)["create"].(map[string]any)["status"].(float64)
	}
	if st := create(); st != 400 {
		t.Fatalf("unmapped field in a strict data stream: %v", st)
	}
	if st, res := call(t, d, "PUT", "/logs-x-default/_mapping", `{"properties":{"j":{"type":"keyword"}}}`); st != 200 {
		t.Fatalf("PUT _mapping on a data stream: %d %v", st, res)
	}
	if st := create(); st != 201 {
		t.Fatalf("added field in the data stream: %v", st)
	}
	_, res = call(t, d, "GET", "/logs-x-default/_mapping", "")
	for name := range res {
		if !strings.HasPrefix(name, ".ds-logs-x-default-") || properties(t, res, name, "")["j"] == nil {
			t.Errorf("GET _mapping of a data stream = %v", res)
		}
	}
}
