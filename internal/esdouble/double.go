// Package esdouble is a test double of Elasticsearch 8: an in-memory HTTP
// server on loopback that speaks the subset of the REST protocol correlator
// uses (bulk, single documents, search, get, refresh, delete-by-query,
// index templates and their simulation, mappings, ILM status and policies,
// data streams). It is NOT Elasticsearch: it does not analyse text, score,
// shard or replicate. It is strict instead: a query clause,
// parameter or body key it does not understand is a 400, as a real cluster
// answers for one it does not know, so a test cannot pass on a filter the
// double silently ignored. Documents are visible to search as soon as the
// bulk request returns (as if every write asked for refresh=true).
package esdouble

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
)

// Version is the Elasticsearch version the double reports.
const Version = "8.19.0"

// Double is a running Elasticsearch double.
type Double struct {
	srv *httptest.Server

	mu          sync.Mutex
	templates   map[string]*template
	policies    map[string]json.RawMessage
	indices     map[string]*index
	dataStreams map[string]string // name -> backing index
	seq         int64             // insertion order across indices, the final tiebreak
	autoID      int64

	// injected failures
	itemFailEvery  int
	itemFailStatus int
	itemFailType   string
	itemCount      int64
	failRequests   int
	failStatus     int

	// counters for tests
	bulkRequests, bulkItems, searchRequests int64
}

// Option configures a Double.
type Option func(*Double)

// WithItemFailures makes every nth bulk item (counted across requests) fail
// with status and error type, e.g. 429 es_rejected_execution_exception or
// 400 mapper_parsing_exception. The failed item is not applied.
func WithItemFailures(every, status int, errType string) Option {
	return func(d *Double) { d.itemFailEvery, d.itemFailStatus, d.itemFailType = every, status, errType }
}

// New starts a double on a loopback port; t's cleanup stops it.
func New(t testing.TB, opts ...Option) *Double {
	t.Helper()
	d := &Double{
		templates:   map[string]*template{},
		policies:    map[string]json.RawMessage{},
		indices:     map[string]*index{},
		dataStreams: map[string]string{},
	}
	for _, o := range opts {
		o(d)
	}
	d.srv = httptest.NewServer(http.HandlerFunc(d.serve))
	t.Cleanup(d.srv.Close)
	return d
}

// URL is the double's base URL.
func (d *Double) URL() string { return d.srv.URL }

// Close stops the server.
func (d *Double) Close() { d.srv.Close() }

// SetItemFailures changes the injected per-item failures; every 0 stops them.
func (d *Double) SetItemFailures(every, status int, errType string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.itemFailEvery, d.itemFailStatus, d.itemFailType, d.itemCount = every, status, errType, 0
}

// FailBulkRequests makes the next n _bulk requests fail whole with status
// (429 answers es_rejected_execution_exception), applying nothing.
func (d *Double) FailBulkRequests(n, status int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.failRequests, d.failStatus = n, status
}

// Stats are the double's request counters.
type Stats struct {
	BulkRequests, BulkItems, SearchRequests int64
}

// Stats returns the request counters.
func (d *Double) Stats() Stats {
	d.mu.Lock()
	defer d.mu.Unlock()
	return Stats{BulkRequests: d.bulkRequests, BulkItems: d.bulkItems, SearchRequests: d.searchRequests}
}

// DocCount is the number of documents in the named index or data stream.
func (d *Double) DocCount(name string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	ix := d.concrete(name)
	if ix == nil {
		return 0
	}
	return len(ix.docs)
}

// Indices lists the concrete index names, sorted.
func (d *Double) Indices() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []string
	for n := range d.indices {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// esError is an error answer in Elasticsearch's shape.
type esError struct {
	status int
	typ    string
	reason string
}

func (e *esError) Error() string { return e.typ + ": " + e.reason }

func errf(status int, typ, format string, args ...any) *esError {
	return &esError{status: status, typ: typ, reason: fmt.Sprintf(format, args...)}
}

func badRequest(format string, args ...any) *esError {
	return errf(http.StatusBadRequest, "illegal_argument_exception", format, args...)
}

func parsingError(format string, args ...any) *esError {
	return errf(http.StatusBadRequest, "parsing_exception", format, args...)
}

func (e *esError) body() map[string]any {
	cause := map[string]any{"type": e.typ, "reason": e.reason}
	return map[string]any{
		"error":  map[string]any{"root_cause": []any{cause}, "type": e.typ, "reason": e.reason},
		"status": e.status,
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeErr(w http.ResponseWriter, e *esError) { writeJSON(w, e.status, e.body()) }

// serve routes a request. Every answer carries X-Elastic-Product, which
// go-elasticsearch v8 checks before it trusts a server.
func (d *Double) serve(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Elastic-Product", "Elasticsearch")
	parts := strings.FieldsFunc(r.URL.Path, func(c rune) bool { return c == '/' })
	var (
		res    any
		status = http.StatusOK
		err    *esError
	)
	m := r.Method
	switch {
	case len(parts) == 0 && (m == http.MethodGet || m == http.MethodHead):
		res, err = d.info(r)
	case len(parts) == 1 && parts[0] == "_bulk" && (m == http.MethodPost || m == http.MethodPut):
		res, status, err = d.bulk(r, "")
	case len(parts) == 2 && parts[1] == "_bulk" && (m == http.MethodPost || m == http.MethodPut):
		res, status, err = d.bulk(r, parts[0])
	case len(parts) == 2 && parts[0] == "_index_template" && parts[1] == "_simulate" && m == http.MethodPost:
		res, err = d.simulateTemplate(r)
	case len(parts) == 2 && parts[0] == "_index_template":
		res, err = d.indexTemplate(r, parts[1])
	case len(parts) == 2 && parts[0] == "_ilm" && parts[1] == "status" && m == http.MethodGet:
		res = map[string]any{"operation_mode": "RUNNING"}
	case len(parts) == 3 && parts[0] == "_ilm" && parts[1] == "policy":
		res, err = d.ilmPolicy(r, parts[2])
	case len(parts) == 2 && parts[0] == "_data_stream":
		res, err = d.dataStream(r, parts[1])
	case len(parts) == 1 && parts[0] == "_search" && (m == http.MethodGet || m == http.MethodPost):
		res, err = d.search(r, "_all")
	case len(parts) == 2 && parts[1] == "_search" && (m == http.MethodGet || m == http.MethodPost):
		res, err = d.search(r, parts[0])
	case len(parts) == 2 && parts[1] == "_delete_by_query" && m == http.MethodPost:
		res, err = d.deleteByQuery(r, parts[0])
	case len(parts) == 1 && parts[0] == "_refresh" && (m == http.MethodPost || m == http.MethodGet):
		res, err = d.refresh(r, "_all")
	case len(parts) == 2 && parts[1] == "_refresh" && (m == http.MethodPost || m == http.MethodGet):
		res, err = d.refresh(r, parts[0])
	case len(parts) == 1 && parts[0] == "_mapping" && m == http.MethodGet:
		res, err = d.mapping(r, "_all")
	case len(parts) == 2 && parts[1] == "_mapping":
		res, err = d.mapping(r, parts[0])
	case len(parts) == 3 && parts[1] == "_doc" && m == http.MethodGet:
		res, status, err = d.getDoc(r, parts[0], parts[2])
	case len(parts) == 3 && parts[1] == "_doc" && (m == http.MethodPut || m == http.MethodPost):
		res, status, err = d.putDoc(r, parts[0], parts[2])
	case len(parts) == 1 && !strings.HasPrefix(parts[0], "_") && m == http.MethodPut:
		res, err = d.createIndex(r, parts[0])
	case len(parts) == 1 && !strings.HasPrefix(parts[0], "_") && m == http.MethodDelete:
		res, err = d.deleteIndex(r, parts[0])
	default:
		err = errf(http.StatusBadRequest, "illegal_argument_exception",
			"the double does not implement %s %s", m, r.URL.Path)
	}
	if err != nil {
		writeErr(w, err)
		return
	}
	if m == http.MethodHead {
		w.WriteHeader(status)
		return
	}
	writeJSON(w, status, res)
}

// checkParams rejects URL parameters outside allowed, as Elasticsearch
// does ("request [...] contains unrecognized parameter").
func checkParams(r *http.Request, allowed ...string) *esError {
	for k := range r.URL.Query() {
		if !slices.Contains(allowed, k) && !slices.Contains([]string{"pretty", "human", "error_trace", "filter_path"}, k) {
			return badRequest("request [%s] contains unrecognized parameter: [%s]", r.URL.Path, k)
		}
	}
	return nil
}

func (d *Double) info(r *http.Request) (any, *esError) {
	if e := checkParams(r); e != nil {
		return nil, e
	}
	return map[string]any{
		"name":         "esdouble",
		"cluster_name": "esdouble",
		"cluster_uuid": "esdouble-cluster-uuid",
		"version": map[string]any{
			"number":                              Version,
			"build_flavor":                        "default",
			"build_type":                          "docker",
			"lucene_version":                      "9.12.1",
			"minimum_wire_compatibility_version":  "7.17.0",
			"minimum_index_compatibility_version": "7.0.0",
		},
		"tagline": "You Know, for Search",
	}, nil
}

func decodeBody(r *http.Request, dst any) *esError {
	dec := json.NewDecoder(r.Body)
	dec.UseNumber()
	if err := dec.Decode(dst); err != nil {
		return errf(http.StatusBadRequest, "x_content_parse_exception", "reading body: %v", err)
	}
	return nil
}

// knownKeys rejects keys of obj outside allowed.
func knownKeys(where string, obj map[string]any, allowed ...string) *esError {
	for k := range obj {
		if !slices.Contains(allowed, k) {
			return parsingError("[%s] unknown field [%s]", where, k)
		}
	}
	return nil
}
