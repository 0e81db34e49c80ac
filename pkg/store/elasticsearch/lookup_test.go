package elasticsearch

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"

	"github.com/execid/correlator/pkg/auditlog"
	"github.com/execid/correlator/pkg/store"
)

// execEvent is one stage of a kubectl exec as kube-apiserver logs it.
func execEvent(auditID, stage, user string, sec int) string {
	return fmt.Sprintf(`{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":%q,"stage":%q,`+
		`"requestURI":"/api/v1/namespaces/default/pods/web-0/exec?command=sh&command=-c&command=id&container=app&stdin=true&tty=true",`+
		`"verb":"create","user":{"username":%q,"groups":["system:authenticated"]},"sourceIPs":["10.0.0.1"],"userAgent":"kubectl/v1.35.0",`+
		`"objectRef":{"resource":"pods","namespace":"default","name":"web-0","apiVersion":"v1","subresource":"exec"},`+
		`"responseStatus":{"metadata":{},"code":101},"requestReceivedTimestamp":"2026-03-01T12:00:00.000000Z",`+
		`"stageTimestamp":"2026-03-01T12:00:%02d.000000Z","annotations":{"authorization.k8s.io/decision":"allow","authorization.k8s.io/reason":"RBAC: ok"}}`,
		auditID, stage, user, sec)
}

// agentDoc wraps an event as Elastic Agent's kubernetes.audit_logs stores it:
// under kubernetes.audit, with annotation keys dedotted.
func agentDoc(event string) string {
	event = strings.ReplaceAll(event, `"authorization.k8s.io/`, `"authorization_k8s_io/`)
	return `{"@timestamp":"2026-03-01T12:00:06Z","data_stream":{"type":"logs","dataset":"kubernetes.audit_logs","namespace":"default"},` +
		`"event":{"kind":"event","action":"create"},"kubernetes":{"audit":` + event + `}}`
}

// agentIndex is where a test's Elastic Agent documents go: under a pattern
// of the test's own, LookupConfig.Pattern, since the integration's
// logs-kubernetes.audit_logs-* is shared by the whole cluster. It is a
// plain index, not the data stream Elastic Agent writes: this cluster
// (no data-streams module) can create a data stream but never delete one,
// and the lookup's search reads both alike.
func agentIndex(cfg Config) (pattern, index string) {
	pattern = "logs-kubernetes.audit_logs-" + cfg.IndexPrefix
	return pattern + "*", pattern + "-default"
}

// installAgentIndex puts a template mirroring the integration's mapping of
// the fields the lookup queries (kubernetes.audit.auditID is a keyword
// there) over the test's agent pattern, and deletes the index at the end
// (the template is under cfg's prefix, which clusterConfig drops).
func installAgentIndex(t *testing.T, c *conn, cfg Config) (pattern, index string) {
	t.Helper()
	pattern, index = agentIndex(cfg)
	body := json.RawMessage(`{"index_patterns":["` + pattern + `"],"priority":200,"template":{"mappings":{"properties":{
		"@timestamp":{"type":"date"},"kubernetes":{"properties":{"audit":{"properties":{"auditID":{"type":"keyword"},"stage":{"type":"keyword"},
		"user":{"properties":{"username":{"type":"keyword"}}}}}}}}}}}`)
	if err := c.put(context.Background(), "/_index_template/"+cfg.IndexPrefix+"-agent-audit", body, ""); err != nil {
		t.Fatalf("installing the agent template: %v", err)
	}
	t.Cleanup(func() { _ = c.do(context.Background(), http.MethodDelete, "/"+index, nil, nil, nil) })
	return pattern, index
}

// postBulk sends NDJSON lines to _bulk, searchable when it returns.
func postBulk(t *testing.T, c *conn, lines ...string) {
	t.Helper()
	res, err := c.es.Bulk(strings.NewReader(strings.Join(lines, "\n")+"\n"), c.es.Bulk.WithRefresh("wait_for"))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var out struct{ Errors bool }
	if err := json.NewDecoder(res.Body).Decode(&out); err != nil || res.IsError() || out.Errors {
		t.Fatalf("bulk: %s %v errors=%v", res.Status(), err, out.Errors)
	}
}

// TestLookupBothSources: records the store wrote (as `audit ship` does)
// and Elastic Agent's are merged into one, on the real cluster; answers
// are cached, so repeated lookups send no search.
func TestLookupBothSources(t *testing.T) {
	ctx := context.Background()
	cfg := clusterConfig(t)
	s := openCluster(t, cfg)
	// Ours: two stages of a1 written by the store (as `audit ship` does).
	if err := s.WriteAuditRecords(ctx, []store.AuditRecord{
		{AuditID: "a1", Stage: "RequestReceived", StageTimestamp: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC),
			Event: json.RawMessage(execEvent("a1", "RequestReceived", "alice", 0))},
		{AuditID: "a1", Stage: "ResponseStarted", StageTimestamp: time.Date(2026, 3, 1, 12, 0, 1, 0, time.UTC),
			Event: json.RawMessage(execEvent("a1", "ResponseStarted", "alice", 1))},
	}); err != nil {
		t.Fatal(err)
	}
	// Elastic Agent's: the last stage of a1, and all of a2 twice.
	pattern, index := installAgentIndex(t, s.c, cfg)
	create := `{"create":{"_index":"` + index + `"}}`
	postBulk(t, s.c,
		create, agentDoc(execEvent("a1", "ResponseComplete", "alice", 5)),
		create, agentDoc(execEvent("a2", "ResponseComplete", "bob", 7)),
		create, agentDoc(execEvent("a2", "ResponseComplete", "bob", 7)),
	)
	reg := prometheus.NewRegistry()
	ct := &countingTransport{}
	l, err := NewLookup(Config{URLs: cfg.URLs, APIKey: cfg.APIKey, IndexPrefix: cfg.IndexPrefix, Transport: ct},
		LookupConfig{Pattern: pattern}, zerolog.Nop(), reg)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := l.LookupExec(ctx, "a1")
	if err != nil || len(recs) != 1 {
		t.Fatalf("LookupExec(a1) = %+v, %v", recs, err)
	}
	r := recs[0]
	if strings.Join(r.Stages, ",") != "RequestReceived,ResponseStarted,ResponseComplete" || !r.Complete() {
		t.Errorf("stages = %v", r.Stages)
	}
	if r.User.Username != "alice" || r.Pod != "web-0" || r.Container != "app" ||
		strings.Join(r.Command, " ") != "sh -c id" || r.Decision != "allow" || r.Reason != "RBAC: ok" {
		t.Errorf("record = %+v", r)
	}
	recs, err = l.LookupExec(ctx, "a2")
	if err != nil || len(recs) != 1 || recs[0].User.Username != "bob" || recs[0].Decision != "allow" {
		t.Fatalf("LookupExec(a2) from Elastic Agent data (deduplicated, annotations redotted) = %+v, %v", recs, err)
	}
	if recs, err := l.LookupExec(ctx, "absent"); err != nil || len(recs) != 0 {
		t.Fatalf("LookupExec(absent) = %v, %v", recs, err)
	}
	if n := ct.searches.Load(); n != 3 {
		t.Fatalf("three lookups sent %d searches", n)
	}

	// Cached: the same questions do not reach the cluster again.
	before := ct.searches.Load()
	for _, id := range []string{"a1", "a2", "absent"} {
		if _, err := l.LookupExec(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if n := ct.searches.Load() - before; n != 0 {
		t.Fatalf("cached lookups sent %d searches", n)
	}
	// Negative answers expire after NegativeTTL.
	l.now = func() time.Time { return time.Now().Add(time.Minute) }
	if _, err := l.LookupExec(ctx, "absent"); err != nil {
		t.Fatal(err)
	}
	if n := ct.searches.Load() - before; n != 1 {
		t.Fatalf("expired negative answer sent %d searches, want 1", n)
	}
	for res, want := range map[string]float64{"found": 2, "not_found": 2, "cached_found": 2, "cached_not_found": 1} {
		if got := testutil.ToFloat64(l.results.WithLabelValues(res)); got != want {
			t.Errorf("lookups{result=%s} = %v, want %v", res, got, want)
		}
	}
}

// TestLookupErrorsAreNotCached: a cluster that does not answer (a closed
// port) fails the lookup, and the failure is not remembered as "absent".
func TestLookupErrorsAreNotCached(t *testing.T) {
	l, err := NewLookup(Config{URLs: []string{"http://127.0.0.1:1"}, RetryInitial: time.Millisecond}, LookupConfig{}, zerolog.Nop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.LookupExec(context.Background(), "a1"); err == nil {
		t.Fatal("lookup against a closed port succeeded")
	}
	if l.cache.Len() != 0 {
		t.Fatal("an error was cached")
	}
}

func TestLookupRateLimit(t *testing.T) {
	cfg := clusterConfig(t)
	l, err := NewLookup(cfg, LookupConfig{Pattern: "-", QPS: 0.001, Burst: 1}, zerolog.Nop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.LookupExec(context.Background(), "x1"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := l.LookupExec(ctx, "x2"); err == nil {
		t.Fatal("second lookup beyond the burst did not wait for the limiter")
	}
	if testutil.ToFloat64(l.waited) != 1 {
		t.Fatalf("rate-limited count = %v", testutil.ToFloat64(l.waited))
	}
}

func TestRedot(t *testing.T) {
	for in, want := range map[string]string{
		"authorization_k8s_io/decision":      "authorization.k8s.io/decision",
		"pod-security_kubernetes_io/enforce": "pod-security.kubernetes.io/enforce",
		"no_slash":                           "no_slash",
		"a_b/c_d":                            "a.b/c_d",
	} {
		if got := redot(in); got != want {
			t.Errorf("redot(%q) = %q, want %q", in, got, want)
		}
	}
}

var _ auditlog.Lookup = (*Lookup)(nil)
