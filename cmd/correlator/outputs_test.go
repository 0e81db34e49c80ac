package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
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

	"github.com/execid/correlator/internal/escluster"
	"github.com/execid/correlator/internal/testutil"
	"github.com/execid/correlator/pkg/api"
	"github.com/execid/correlator/pkg/store"
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

// esRunFlags are the flags that put `correlator run`'s store on the real
// cluster under an index prefix of t's own (dropped after t), and the
// prefix.
func esRunFlags(t *testing.T, es *escluster.Cluster) ([]string, string) {
	t.Helper()
	prefix := escluster.Prefix(t, es)
	args := []string{"--es-index-prefix", prefix, "--es-refresh", "wait_for"}
	for _, u := range es.URLs() {
		args = append(args, "--es-url", u)
	}
	return append(args, esAPIKeyFlag(t)...), prefix
}

// esAPIKeyFlag passes the test cluster's API key, if it has one, as the
// commands take it: in a file.
func esAPIKeyFlag(t *testing.T) []string {
	t.Helper()
	key := os.Getenv(escluster.EnvAPIKey)
	if key == "" {
		return nil
	}
	f := filepath.Join(t.TempDir(), "es-api-key")
	if err := os.WriteFile(f, []byte(key), 0o600); err != nil {
		t.Fatal(err)
	}
	return []string{"--es-api-key-file", f}
}

// TestRunElasticsearchAndAlerts runs the real binary with the store in
// Elasticsearch (the real cluster) and three alert sinks: an exec into
// kube-system arrives by the webhook, is stored in Elasticsearch, served by
// the API, and raises the shipped rule's alert in the file, the webhook
// receiver and the Elasticsearch alerts indices.
func TestRunElasticsearchAndAlerts(t *testing.T) {
	bin := buildBinary(t)
	es := escluster.Shared(t)
	esArgs, prefix := esRunFlags(t, es)
	hook := &hookReceiver{}
	hookSrv := httptest.NewServer(hook)
	defer hookSrv.Close()
	dir := t.TempDir()
	alertsFile := filepath.Join(dir, "alerts.jsonl")
	addr := freePort(t)
	cmd := exec.Command(bin, append([]string{"run", "--no-capture", "--listen", addr, "--insecure-no-auth",
		"--store", "elasticsearch",
		"--alert-sink", "file:" + alertsFile, "--alert-sink", "webhook:" + hookSrv.URL, "--alert-sink", "elasticsearch:" + es.URL(),
		"--alert-spool-dir", filepath.Join(dir, "spool"), "--audit-checkpoint-dir", ""}, esArgs...)...)
	var stderr testutil.SyncBuffer
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
	// Each stage is written, and each sink delivers, on its own schedule:
	// wait for every one of them, however busy the machine.
	client := &api.Client{BaseURL: base, HTTP: &http.Client{Timeout: testutil.EventuallyBound}}
	var v api.SessionView
	testutil.EventuallyNil(t, func() error {
		if v, err = client.Session(context.Background(), req.AuditID); err != nil || len(v.AuditRecords) == 0 {
			return fmt.Errorf("session %+v, %v\n%s", v, err, stderr.String())
		}
		return nil
	})
	if v.User.Username != "mallory" || v.Namespace != "kube-system" {
		t.Errorf("session from Elasticsearch: %+v", v.SessionDetail)
	}
	testutil.EventuallyNil(t, func() error {
		hooked, filed := hook.rules(), fileRules(t, alertsFile)
		if !slices.ContainsFunc(hooked, func(r string) bool { return strings.Contains(r, "kube-system") }) {
			return fmt.Errorf("no kube-system alert among the webhook's %v (file sink: %v)\n%s", hooked, filed, stderr.String())
		}
		if !slices.Equal(filed, hooked) {
			return fmt.Errorf("file sink rules %v, webhook rules %v: want the same alerts", filed, hooked)
		}
		return nil
	})
	testutil.EventuallyNil(t, func() error {
		if n, err := es.Count(context.Background(), prefix+"-alerts*"); err != nil || n == 0 {
			return fmt.Errorf("no alert in the Elasticsearch alerts indices %s-alerts* (%v)", prefix, err)
		}
		stored, delivered := storedAlerts(t, base), len(hook.rules())
		if stored != delivered {
			return fmt.Errorf("stored alerts %d, delivered %d", stored, delivered)
		}
		return nil
	})
}

// storedAlerts counts the alerts the API serves from the store.
func storedAlerts(t *testing.T, base string) int {
	t.Helper()
	alerts, err := http.Get(base + "/api/v1/alerts")
	if err != nil || alerts.StatusCode != http.StatusOK {
		t.Fatalf("GET alerts: %v %v", alerts, err)
	}
	defer alerts.Body.Close()
	var page api.Page[store.Alert]
	if err := json.NewDecoder(alerts.Body).Decode(&page); err != nil {
		t.Fatalf("decoding alerts: %v", err)
	}
	return len(page.Items)
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

func waitReady(t *testing.T, base string, stderr *testutil.SyncBuffer) {
	t.Helper()
	testutil.EventuallyNil(t, func() error {
		resp, err := http.Get(base + "/readyz")
		if err != nil {
			return fmt.Errorf("not ready: %w\n%s", err, stderr.String())
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("not ready: %s\n%s", resp.Status, stderr.String())
		}
		return nil
	})
}
