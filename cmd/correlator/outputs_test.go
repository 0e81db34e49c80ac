package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/execid/correlator/internal/esdouble"
	"github.com/execid/correlator/internal/testutil"
	"github.com/execid/correlator/pkg/api"
	"github.com/execid/correlator/pkg/auditlog"
	"github.com/execid/correlator/pkg/store"
	"github.com/execid/correlator/pkg/store/elasticsearch"
)

// hookReceiver is a webhook alert sink's far end on loopback.
type hookReceiver struct {
	mu     sync.Mutex
	alerts []store.Alert
}

func (h *hookReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var got []store.Alert
	if err := json.NewDecoder(r.Body).Decode(&got); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	h.mu.Lock()
	h.alerts = append(h.alerts, got...)
	h.mu.Unlock()
}

func (h *hookReceiver) rules() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, a := range h.alerts {
		out = append(out, a.Rule)
	}
	return out
}

// TestRunElasticsearchAndAlerts runs the real binary with the store in
// Elasticsearch (the protocol double) and three alert sinks: an exec into
// kube-system arrives by the webhook, is stored in Elasticsearch, served by
// the API, and raises the shipped rule's alert in the file, the webhook
// receiver and the Elasticsearch alerts data stream.
func TestRunElasticsearchAndAlerts(t *testing.T) {
	bin := buildBinary(t)
	es := esdouble.New(t)
	hook := &hookReceiver{}
	hookSrv := httptest.NewServer(hook)
	defer hookSrv.Close()
	dir := t.TempDir()
	alertsFile := filepath.Join(dir, "alerts.jsonl")
	addr := freePort(t)
	cmd := exec.Command(bin, "run", "--no-capture", "--listen", addr, "--insecure-no-auth",
		"--store", "elasticsearch", "--es-url", es.URL(), "--es-refresh", "wait_for",
		"--alert-sink", "file:"+alertsFile, "--alert-sink", "webhook:"+hookSrv.URL, "--alert-sink", "elasticsearch:"+es.URL(),
		"--alert-spool-dir", filepath.Join(dir, "spool"), "--audit-checkpoint-dir", "")
	var stderr syncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Signal(syscall.SIGTERM)
		if err := cmd.Wait(); err != nil {
			t.Errorf("agent exit: %v\n%s", err, stderr.String())
		}
	}()
	base := "http://" + addr
	waitReady(t, base, &stderr)

	req := testutil.ExecRequest{AuditID: testutil.RandomUUID(), User: "mallory", Namespace: "kube-system", Pod: "etcd-0",
		Container: "etcd", Command: []string{"sh"}, TTY: true, Received: time.Now(), Duration: time.Second}
	resp, err := http.Post(base+api.WebhookPath, "application/json", bytes.NewReader(req.EventList()))
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("webhook POST: %v %v", resp, err)
	}
	client := &api.Client{BaseURL: base, HTTP: &http.Client{Timeout: 10 * time.Second}}
	var v api.SessionView
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		v, err = client.Session(context.Background(), req.AuditID)
		if err == nil && len(hook.rules()) > 0 && fileRules(t, alertsFile) != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("session %+v, %v; webhook alerts %v; file alerts %v\n%s", v, err, hook.rules(), fileRules(t, alertsFile), stderr.String())
		}
	}
	if v.Username != "mallory" || v.Namespace != "kube-system" || len(v.AuditRecords) == 0 {
		t.Errorf("session from Elasticsearch: %+v", v.SessionDetail)
	}
	if got := fileRules(t, alertsFile); !slices.Equal(got, hook.rules()) {
		t.Errorf("file sink rules %v, webhook rules %v: want the same alerts", got, hook.rules())
	}
	if !slices.ContainsFunc(hook.rules(), func(r string) bool { return strings.Contains(r, "kube-system") }) {
		t.Errorf("no kube-system alert among %v", hook.rules())
	}
	for deadline := time.Now().Add(10 * time.Second); es.DocCount("correlator-alerts") == 0; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no alert in the Elasticsearch data stream; indices %v", es.Indices())
		}
	}
	alerts, err := http.Get(base + "/api/v1/alerts")
	if err != nil || alerts.StatusCode != http.StatusOK {
		t.Fatalf("GET alerts: %v %v", alerts, err)
	}
	var page api.Page[store.Alert]
	json.NewDecoder(alerts.Body).Decode(&page)
	alerts.Body.Close()
	if len(page.Items) != len(hook.rules()) {
		t.Errorf("stored alerts %d, delivered %d", len(page.Items), len(hook.rules()))
	}
}

func fileRules(t *testing.T, path string) []string {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var a store.Alert
		if err := json.Unmarshal(sc.Bytes(), &a); err != nil {
			t.Fatalf("alert file line %q: %v", sc.Text(), err)
		}
		out = append(out, a.Rule)
	}
	return out
}

func waitReady(t *testing.T, base string, stderr *syncBuffer) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if resp, err := http.Get(base + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("not ready\n%s", stderr.String())
		}
	}
}

// TestAuditShip: the control-plane role tails a real audit log into
// Elasticsearch (the double), and a node's lookup finds the record there.
func TestAuditShip(t *testing.T) {
	es := esdouble.New(t)
	dir := t.TempDir()
	logPath := filepath.Join(dir, "audit.log")
	req := testutil.ExecRequest{AuditID: testutil.RandomUUID(), User: "alice", Namespace: "shop", Pod: "web-0",
		Container: "app", Command: []string{"cat", "/etc/passwd"}, Received: time.Now(), Duration: time.Second}
	noise := `{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"n1","stage":"ResponseComplete","requestURI":"/api/v1/pods","verb":"list","user":{"username":"kubelet"},"requestReceivedTimestamp":"2026-01-01T00:00:00Z","stageTimestamp":"2026-01-01T00:00:00Z"}` + "\n"
	if err := os.WriteFile(logPath, append([]byte(noise), req.LogLines()...), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := elasticsearch.DefaultConfig()
	cfg.URLs, cfg.Refresh = []string{es.URL()}, "wait_for"
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := elasticsearch.Open(ctx, cfg, zerolog.Nop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	m, err := auditlog.NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	o := auditSourceOptions{logPaths: []string{logPath}}
	srcs, err := o.sources(zerolog.Nop(), m)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- ship(ctx, srcs, st.WriteAuditRecords, zerolog.Nop()) }()

	l, err := elasticsearch.NewLookup(cfg, elasticsearch.LookupConfig{Pattern: "-", NegativeTTL: time.Millisecond}, zerolog.Nop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var recs []auditlog.ExecRecord
	for deadline := time.Now().Add(20 * time.Second); len(recs) == 0 || !recs[0].Complete(); time.Sleep(50 * time.Millisecond) {
		if recs, err = l.LookupExec(ctx, req.AuditID); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("lookup found %+v", recs)
		}
	}
	if r := recs[0]; r.User.Username != "alice" || r.Pod != "web-0" || !slices.Equal(r.Command, req.Command) {
		t.Errorf("shipped record %+v", r)
	}
	if n := es.DocCount("correlator-audit"); n != 3 {
		t.Errorf("audit index holds %d stages, want the 3 of the exec and not the list", n)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("ship: %v", err)
	}
}
