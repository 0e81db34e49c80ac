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

	"github.com/execid/correlator/internal/esdouble"
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

// installAgentTemplate mirrors the integration's mapping of the fields the
// lookup queries (kubernetes.audit.auditID is a keyword there).
func installAgentTemplate(t *testing.T, d *esdouble.Double) {
	t.Helper()
	body := `{"index_patterns":["logs-kubernetes.audit_logs-*"],"data_stream":{},"priority":200,"template":{"mappings":{"properties":{
		"@timestamp":{"type":"date"},"kubernetes":{"properties":{"audit":{"properties":{"auditID":{"type":"keyword"},"stage":{"type":"keyword"},
		"user":{"properties":{"username":{"type":"keyword"}}}}}}}}}}}`
	req, _ := http.NewRequest("PUT", d.URL()+"/_index_template/logs-kubernetes.audit_logs", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("installing agent template: %v %v", res, err)
	}
	res.Body.Close()
}

func postBulk(t *testing.T, d *esdouble.Double, lines ...string) {
	t.Helper()
	res, err := http.Post(d.URL()+"/_bulk", "application/x-ndjson", strings.NewReader(strings.Join(lines, "\n")+"\n"))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var out struct{ Errors bool }
	if err := json.NewDecoder(res.Body).Decode(&out); err != nil || out.Errors {
		t.Fatalf("bulk: %v errors=%v", err, out.Errors)
	}
}

func TestLookupBothSources(t *testing.T) {
	ctx := context.Background()
	d := esdouble.New(t)
	installAgentTemplate(t, d)
	s := openDouble(t, d, Config{})
	// Ours: two stages of a1 written by the store (as `audit ship` does).
	if err := s.WriteAuditRecords(ctx, []store.AuditRecord{
		{AuditID: "a1", Stage: "RequestReceived", StageTimestamp: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC),
			Event: json.RawMessage(execEvent("a1", "RequestReceived", "alice", 0))},
		{AuditID: "a1", Stage: "ResponseStarted", StageTimestamp: time.Date(2026, 3, 1, 12, 0, 1, 0, time.UTC),
			Event: json.RawMessage(execEvent("a1", "ResponseStarted", "alice", 1))},
	}); err != nil {
		t.Fatal(err)
	}
	// Elastic Agent's: the last stage of a1, and all of a2.
	postBulk(t, d,
		`{"create":{"_index":"logs-kubernetes.audit_logs-default"}}`, agentDoc(execEvent("a1", "ResponseComplete", "alice", 5)),
		`{"create":{"_index":"logs-kubernetes.audit_logs-default"}}`, agentDoc(execEvent("a2", "ResponseComplete", "bob", 7)),
		`{"create":{"_index":"logs-kubernetes.audit_logs-default"}}`, agentDoc(execEvent("a2", "ResponseComplete", "bob", 7)),
	)
	reg := prometheus.NewRegistry()
	l, err := NewLookup(Config{URLs: []string{d.URL()}}, LookupConfig{}, zerolog.Nop(), reg)
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

	// Cached: the same questions do not reach the cluster again.
	before := d.Stats().SearchRequests
	for _, id := range []string{"a1", "a2", "absent"} {
		if _, err := l.LookupExec(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if n := d.Stats().SearchRequests - before; n != 0 {
		t.Fatalf("cached lookups sent %d searches", n)
	}
	// Negative answers expire after NegativeTTL.
	l.now = func() time.Time { return time.Now().Add(time.Minute) }
	if _, err := l.LookupExec(ctx, "absent"); err != nil {
		t.Fatal(err)
	}
	if n := d.Stats().SearchRequests - before; n != 1 {
		t.Fatalf("expired negative answer sent %d searches, want 1", n)
	}
	for res, want := range map[string]float64{"found": 2, "not_found": 2, "cached_found": 2, "cached_not_found": 1} {
		if got := testutil.ToFloat64(l.results.WithLabelValues(res)); got != want {
			t.Errorf("lookups{result=%s} = %v, want %v", res, got, want)
		}
	}
}

func TestLookupErrorsAreNotCached(t *testing.T) {
	d := esdouble.New(t)
	l, err := NewLookup(Config{URLs: []string{d.URL()}, RetryInitial: time.Millisecond}, LookupConfig{}, zerolog.Nop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	d.Close()
	if _, err := l.LookupExec(context.Background(), "a1"); err == nil {
		t.Fatal("lookup against a stopped server succeeded")
	}
	if l.cache.Len() != 0 {
		t.Fatal("an error was cached")
	}
}

func TestLookupRateLimit(t *testing.T) {
	d := esdouble.New(t)
	l, err := NewLookup(Config{URLs: []string{d.URL()}}, LookupConfig{QPS: 0.001, Burst: 1}, zerolog.Nop(), nil)
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
