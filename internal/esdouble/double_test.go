package esdouble

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/elastic/go-elasticsearch/v8"
)

// The expectations below are Elasticsearch 8 behaviour written down by hand
// from its documentation and observed answers: status codes, error types
// and the shape of bulk and search responses.

func call(t *testing.T, d *Double, method, path, body string) (int, map[string]any) {
	t.Helper()
	return callN(t, d, method, path, body, false)
}

// callN decodes numbers as json.Number when exact, as a client must for
// date_nanos sort values.
func callN(t *testing.T, d *Double, method, path, body string, exact bool) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, d.URL()+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if got := res.Header.Get("X-Elastic-Product"); got != "Elasticsearch" {
		t.Fatalf("%s %s: X-Elastic-Product = %q", method, path, got)
	}
	raw, _ := io.ReadAll(res.Body)
	var out map[string]any
	if len(raw) > 0 {
		dec := json.NewDecoder(strings.NewReader(string(raw)))
		if exact {
			dec.UseNumber()
		}
		if err := dec.Decode(&out); err != nil {
			t.Fatalf("%s %s: decoding %q: %v", method, path, raw, err)
		}
	}
	return res.StatusCode, out
}

func errType(m map[string]any) string {
	e, _ := m["error"].(map[string]any)
	s, _ := e["type"].(string)
	return s
}

const testTemplate = `{"index_patterns":["t-*"],"template":{"mappings":{"properties":{
	"@timestamp":{"type":"date_nanos"},"name":{"type":"keyword"},"n":{"type":"long"},
	"cmd":{"type":"wildcard"},"raw":{"type":"keyword","index":false,"doc_values":false},
	"blob":{"type":"object","enabled":false}}}}}`

func setup(t *testing.T) *Double {
	d := New(t)
	if st, res := call(t, d, "PUT", "/_index_template/t", testTemplate); st != 200 || res["acknowledged"] != true {
		t.Fatalf("template: %d %v", st, res)
	}
	return d
}

func bulkBody(lines ...string) string { return strings.Join(lines, "\n") + "\n" }

func TestClientAcceptsDouble(t *testing.T) {
	d := New(t)
	es, err := elasticsearch.NewClient(elasticsearch.Config{Addresses: []string{d.URL()}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := es.Info(es.Info.WithContext(context.Background()))
	if err != nil {
		t.Fatalf("Info through go-elasticsearch: %v", err)
	}
	defer res.Body.Close()
	var info struct {
		Version struct{ Number string } `json:"version"`
	}
	if err := json.NewDecoder(res.Body).Decode(&info); err != nil || info.Version.Number != Version {
		t.Fatalf("info = %+v, %v", info, err)
	}
}

func TestBulkItemResults(t *testing.T) {
	d := setup(t)
	st, res := call(t, d, "POST", "/_bulk", bulkBody(
		`{"index":{"_index":"t-1","_id":"a"}}`, `{"name":"x","n":1,"@timestamp":"2026-03-01T12:00:00.000000001Z"}`,
		`{"create":{"_index":"t-1","_id":"a"}}`, `{"name":"y"}`,
		`{"index":{"_index":"t-1","_id":"a"}}`, `{"name":"z","n":2}`,
		`{"index":{"_index":"t-1","_id":"b"}}`, `{"n":"not a number"}`,
		`{"update":{"_index":"t-1","_id":"missing"}}`, `{"doc":{"name":"q"}}`,
		`{"delete":{"_index":"t-1","_id":"a"}}`,
	))
	if st != 200 || res["errors"] != true {
		t.Fatalf("bulk: %d errors=%v", st, res["errors"])
	}
	items := res["items"].([]any)
	want := []struct {
		op     string
		status float64
		result string
		errTyp string
	}{
		{"index", 201, "created", ""},
		{"create", 409, "", "version_conflict_engine_exception"},
		{"index", 200, "updated", ""},
		{"index", 400, "", "document_parsing_exception"},
		{"update", 404, "", "document_missing_exception"},
		{"delete", 200, "deleted", ""},
	}
	for i, w := range want {
		it := items[i].(map[string]any)[w.op].(map[string]any)
		if it["status"] != w.status || (w.result != "" && it["result"] != w.result) || errType(it) != w.errTyp {
			t.Errorf("item %d (%s) = %v, want status %v result %q error %q", i, w.op, it, w.status, w.result, w.errTyp)
		}
	}
	if n := d.DocCount("t-1"); n != 0 {
		t.Errorf("doc count after delete = %d", n)
	}
}

func TestBulkInjectedFailures(t *testing.T) {
	d := setup(t)
	d.SetItemFailures(2, 429, "es_rejected_execution_exception")
	_, res := call(t, d, "POST", "/t-1/_bulk", bulkBody(
		`{"index":{"_id":"1"}}`, `{"n":1}`, `{"index":{"_id":"2"}}`, `{"n":2}`,
		`{"index":{"_id":"3"}}`, `{"n":3}`, `{"index":{"_id":"4"}}`, `{"n":4}`))
	var statuses []float64
	for _, it := range res["items"].([]any) {
		statuses = append(statuses, it.(map[string]any)["index"].(map[string]any)["status"].(float64))
	}
	if want := []float64{201, 429, 201, 429}; !equalF(statuses, want) {
		t.Fatalf("statuses = %v, want %v", statuses, want)
	}
	if n := d.DocCount("t-1"); n != 2 {
		t.Fatalf("doc count = %d, want 2 (failed items not applied)", n)
	}
	d.SetItemFailures(0, 0, "")
	d.FailBulkRequests(1, 429)
	st, res := call(t, d, "POST", "/t-1/_bulk", bulkBody(`{"index":{"_id":"9"}}`, `{"n":9}`))
	if st != 429 || errType(res) != "es_rejected_execution_exception" {
		t.Fatalf("whole-request failure: %d %v", st, res)
	}
	if st, _ := call(t, d, "POST", "/t-1/_bulk", bulkBody(`{"index":{"_id":"9"}}`, `{"n":9}`)); st != 200 {
		t.Fatalf("after injected failure: %d", st)
	}
}

func equalF(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func seed(t *testing.T, d *Double) {
	t.Helper()
	_, res := call(t, d, "POST", "/_bulk", bulkBody(
		`{"index":{"_index":"t-a","_id":"1"}}`, `{"name":"alice","n":1,"cmd":"sh -c ls *","@timestamp":"2026-03-01T12:00:00.000000003Z"}`,
		`{"index":{"_index":"t-a","_id":"2"}}`, `{"name":"bob","n":2,"cmd":"cat /etc/passwd","@timestamp":"2026-03-01T12:00:00.000000002Z"}`,
		`{"index":{"_index":"t-b","_id":"3"}}`, `{"name":["alice","carol"],"n":3,"@timestamp":"2026-03-01T12:00:00.000000001Z"}`,
	))
	if res["errors"] != false {
		t.Fatalf("seeding: %v", res)
	}
}

func ids(res map[string]any) []string {
	var out []string
	for _, h := range res["hits"].(map[string]any)["hits"].([]any) {
		out = append(out, h.(map[string]any)["_id"].(string))
	}
	return out
}

func TestSearch(t *testing.T) {
	d := setup(t)
	seed(t, d)
	cases := []struct {
		name, body string
		want       string
	}{
		{"term on array value", `{"query":{"bool":{"filter":[{"term":{"name":"alice"}}]}},"sort":[{"n":"asc"}]}`, "1,3"},
		{"terms", `{"query":{"terms":{"name":["bob","carol"]}},"sort":[{"n":"desc"}]}`, "3,2"},
		{"range on date_nanos keeps nanoseconds", `{"query":{"range":{"@timestamp":{"gte":"2026-03-01T12:00:00.000000002Z","lt":"2026-03-01T12:00:00.000000003Z"}}},"sort":["n"]}`, "2"},
		{"wildcard escapes", `{"query":{"wildcard":{"cmd":{"value":"*ls \\**"}}},"sort":["n"]}`, "1"},
		{"wildcard is case sensitive", `{"query":{"wildcard":{"cmd":{"value":"*PASSWD*"}}},"sort":["n"]}`, ""},
		{"exists", `{"query":{"exists":{"field":"cmd"}},"sort":["n"]}`, "1,2"},
		{"must_not", `{"query":{"bool":{"must_not":[{"term":{"name":"alice"}}]}},"sort":["n"]}`, "2"},
		{"unmapped term matches nothing", `{"query":{"term":{"nope":"x"}},"sort":["n"]}`, ""},
		{"size", `{"size":1,"sort":[{"@timestamp":{"order":"desc"}}]}`, "1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st, res := call(t, d, "POST", "/t-*/_search", c.body)
			if st != 200 {
				t.Fatalf("status %d: %v", st, res)
			}
			if got := strings.Join(ids(res), ","); got != c.want {
				t.Fatalf("ids = %q, want %q", got, c.want)
			}
		})
	}
}

func TestSearchAfterDateNanos(t *testing.T) {
	d := setup(t)
	seed(t, d)
	body := `{"size":1,"sort":[{"@timestamp":"desc"},{"name":"desc"}]}`
	_, res := callN(t, d, "POST", "/t-*/_search", body, true)
	hit := res["hits"].(map[string]any)["hits"].([]any)[0].(map[string]any)
	sv := hit["sort"].([]any)
	// date_nanos sort values are epoch nanoseconds.
	if sv[0].(json.Number) != "1772366400000000003" {
		t.Fatalf("sort value = %v", sv)
	}
	var seen []string
	seen = append(seen, ids(res)...)
	for range 5 {
		after, _ := json.Marshal(sv)
		_, res = callN(t, d, "POST", "/t-*/_search", `{"size":1,"sort":[{"@timestamp":"desc"},{"name":"desc"}],"search_after":`+string(after)+`}`, true)
		hs := res["hits"].(map[string]any)["hits"].([]any)
		if len(hs) == 0 {
			break
		}
		seen = append(seen, ids(res)...)
		sv = hs[0].(map[string]any)["sort"].([]any)
	}
	if got := strings.Join(seen, ","); got != "1,2,3" {
		t.Fatalf("paged = %s", got)
	}
}

func TestStrictRejections(t *testing.T) {
	d := setup(t)
	seed(t, d)
	cases := []struct {
		name, method, path, body string
		status                   int
		typ                      string
	}{
		{"unknown query", "POST", "/t-*/_search", `{"query":{"match_phrase":{"cmd":"x"}}}`, 400, "parsing_exception"},
		{"unknown bool key", "POST", "/t-*/_search", `{"query":{"bool":{"filters":[]}}}`, 400, "parsing_exception"},
		{"unknown body key", "POST", "/t-*/_search", `{"querry":{}}`, 400, "parsing_exception"},
		{"unknown url parameter", "POST", "/t-*/_search?sizee=1", `{}`, 400, "illegal_argument_exception"},
		{"sort on unmapped", "POST", "/t-*/_search", `{"sort":[{"nope":"asc"}]}`, 400, "query_shard_exception"},
		{"query on unindexed", "POST", "/t-*/_search", `{"query":{"term":{"raw":"x"}}}`, 400, "illegal_argument_exception"},
		{"result window", "POST", "/t-*/_search", `{"size":10001}`, 400, "illegal_argument_exception"},
		{"missing index", "POST", "/nope/_search", `{}`, 404, "index_not_found_exception"},
		{"terms lookup", "POST", "/t-*/_search", `{"query":{"terms":{"name":{"index":"u","id":"1","path":"p"}}}}`, 400, "parsing_exception"},
		{"create existing index", "PUT", "/t-a", ``, 400, "resource_already_exists_exception"},
		{"bad ILM phase", "PUT", "/_ilm/policy/p", `{"policy":{"phases":{"tepid":{"actions":{}}}}}`, 400, "illegal_argument_exception"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st, res := call(t, d, c.method, c.path, c.body)
			if st != c.status || errType(res) != c.typ {
				t.Fatalf("got %d %q, want %d %q (%v)", st, errType(res), c.status, c.typ, res)
			}
		})
	}
	// A wildcard matching nothing is an empty answer, not an error.
	if st, res := call(t, d, "POST", "/nothing-*/_search", `{}`); st != 200 || len(ids(res)) != 0 {
		t.Fatalf("empty wildcard: %d %v", st, res)
	}
}

func TestDataStreamAndDeleteByQuery(t *testing.T) {
	d := New(t)
	call(t, d, "PUT", "/_index_template/ds", `{"index_patterns":["logs-x-*"],"data_stream":{},"priority":200,
		"template":{"mappings":{"properties":{"@timestamp":{"type":"date"},"k":{"type":"keyword"}}}}}`)
	if st, res := call(t, d, "PUT", "/_data_stream/logs-x-default", ``); st != 200 {
		t.Fatalf("creating data stream: %d %v", st, res)
	}
	if st, res := call(t, d, "PUT", "/_data_stream/logs-x-default", ``); st != 400 || errType(res) != "resource_already_exists_exception" {
		t.Fatalf("creating it again: %d %v", st, res)
	}
	_, res := call(t, d, "POST", "/_bulk", bulkBody(
		`{"index":{"_index":"logs-x-default","_id":"1"}}`, `{"@timestamp":"2026-01-01T00:00:00Z","k":"a"}`,
		`{"create":{"_index":"logs-x-default","_id":"2"}}`, `{"k":"b"}`,
		`{"create":{"_index":"logs-x-default","_id":"3"}}`, `{"@timestamp":"2026-01-01T00:00:00Z","k":"c"}`,
		`{"create":{"_index":"logs-x-other"}}`, `{"@timestamp":"2026-01-02T00:00:00Z","k":"d"}`,
	))
	var got []float64
	for i, it := range res["items"].([]any) {
		for _, v := range it.(map[string]any) {
			got = append(got, v.(map[string]any)["status"].(float64))
			if i == 2 && !strings.HasPrefix(v.(map[string]any)["_index"].(string), ".ds-logs-x-default-") {
				t.Errorf("data stream item index = %v", v)
			}
		}
	}
	if want := []float64{400, 400, 201, 201}; !equalF(got, want) {
		t.Fatalf("statuses = %v, want %v (index op and missing @timestamp refused)", got, want)
	}
	st, res := call(t, d, "POST", "/logs-x-*/_delete_by_query?refresh=true", `{"query":{"range":{"@timestamp":{"lt":"2026-01-02T00:00:00Z"}}}}`)
	if st != 200 || res["deleted"] != 1.0 {
		t.Fatalf("delete_by_query: %d %v", st, res)
	}
	if _, res := call(t, d, "POST", "/logs-x-*/_search", `{"query":{"match_all":{}}}`); strings.Join(ids(res), ",") == "" {
		t.Fatal("delete_by_query removed too much")
	}
}

func TestAggregations(t *testing.T) {
	d := setup(t)
	seed(t, d)
	st, res := call(t, d, "POST", "/t-*/_search", `{"size":0,"aggs":{"by":{"terms":{"field":"name","size":10,"include":["alice","bob"]},
		"aggs":{"first":{"top_hits":{"size":1,"sort":[{"@timestamp":"asc"}],"_source":["@timestamp"]}}}}}}`)
	if st != 200 {
		t.Fatalf("%d %v", st, res)
	}
	buckets := res["aggregations"].(map[string]any)["by"].(map[string]any)["buckets"].([]any)
	if len(buckets) != 2 {
		t.Fatalf("buckets = %v", buckets)
	}
	b0 := buckets[0].(map[string]any)
	if b0["key"] != "alice" || b0["doc_count"] != 2.0 {
		t.Fatalf("first bucket = %v (doc_count desc, then key)", b0)
	}
	top := b0["first"].(map[string]any)["hits"].(map[string]any)["hits"].([]any)[0].(map[string]any)
	if top["_id"] != "3" || top["_source"].(map[string]any)["@timestamp"] != "2026-03-01T12:00:00.000000001Z" {
		t.Fatalf("top hit = %v", top)
	}
}

// TestSingleDocAndProbes: a document PUT with op_type=create is created
// once (409 after), bulk's injected failures do not reach it; a template
// simulation is a 400 for a type the double lacks and stores nothing; ILM
// answers its status.
func TestSingleDocAndProbes(t *testing.T) {
	d := New(t, WithItemFailures(1, 429, "es_rejected_execution_exception"))
	if st, res := call(t, d, "PUT", "/m/_doc/layout?op_type=create", `{"period_seconds":86400}`); st != 201 || res["result"] != "created" {
		t.Fatalf("create: %d %v", st, res)
	}
	if st, res := call(t, d, "PUT", "/m/_doc/layout?op_type=create", `{"period_seconds":60}`); st != 409 ||
		errType(res) != "version_conflict_engine_exception" {
		t.Fatalf("second create: %d %v", st, res)
	}
	if st, res := call(t, d, "GET", "/m/_doc/layout", ""); st != 200 || res["_source"].(map[string]any)["period_seconds"] != 86400.0 {
		t.Fatalf("get: %d %v", st, res)
	}
	if st, res := call(t, d, "PUT", "/m/_doc/layout?op_type=upsert", `{}`); st != 400 || errType(res) != "illegal_argument_exception" {
		t.Fatalf("bad op_type: %d %v", st, res)
	}
	if st, res := call(t, d, "POST", "/_index_template/_simulate",
		`{"index_patterns":["p-x"],"template":{"mappings":{"properties":{"c":{"type":"nonesuch"}}}}}`); st != 400 ||
		errType(res) != "mapper_parsing_exception" {
		t.Fatalf("simulate an unknown type: %d %v", st, res)
	}
	if st, res := call(t, d, "POST", "/_index_template/_simulate",
		`{"index_patterns":["p-x"],"template":{"mappings":{"properties":{"c":{"type":"wildcard"}}}}}`); st != 200 || res["template"] == nil {
		t.Fatalf("simulate: %d %v", st, res)
	}
	if st, _ := call(t, d, "GET", "/_index_template/_simulate", ""); st != 404 && st != 400 {
		t.Fatalf("simulate stored a template named _simulate: %d", st)
	}
	if st, res := call(t, d, "GET", "/_ilm/status", ""); st != 200 || res["operation_mode"] != "RUNNING" {
		t.Fatalf("ILM status: %d %v", st, res)
	}
}
