package bridge

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/rs/zerolog"
	admissionv1 "k8s.io/api/admission/v1"

	"github.com/execid/correlator/internal/testutil"
)

// testServer is a bridge serving HTTPS on loopback.
type testServer struct {
	url   string
	addr  string
	ca    *testCA
	http  *http.Client
	certs [2]string
	errc  chan error
}

func startServer(t testing.TB, edit func(*Config)) *testServer {
	t.Helper()
	ca := newTestCA(t)
	certFile, keyFile := certPaths(t)
	ca.issue(t, 100, certFile, keyFile)
	cfg := Default()
	cfg.CertFile, cfg.KeyFile, cfg.CertReload = certFile, keyFile, 10*time.Millisecond
	if edit != nil {
		edit(&cfg)
	}
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	mut, err := NewMutator(cfg.Key, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := NewServer(cfg, NewHandler(mut, cfg.MaxBodyBytes, zerolog.Nop(), m),
		promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), zerolog.Nop(), m)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ts := &testServer{addr: ln.Addr().String(), ca: ca, certs: [2]string{certFile, keyFile}, errc: make(chan error, 1)}
	ts.url = "https://" + ts.addr
	go func() { ts.errc <- srv.Serve(ctx, ln, nil) }()
	t.Cleanup(func() {
		cancel()
		if err := <-ts.errc; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	ts.http = &http.Client{Transport: &http.Transport{TLSClientConfig: ca.client().cfg}, Timeout: testutil.EventuallyBound}
	return ts
}

// post sends body as the apiserver does and returns the status and review.
func (ts *testServer) post(t testing.TB, body []byte) (int, *admissionv1.AdmissionReview) {
	t.Helper()
	resp, err := ts.http.Post(ts.url+MutatePath, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode, nil
	}
	var out admissionv1.AdmissionReview
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("response %s: %v", b, err)
	}
	return resp.StatusCode, &out
}

func (ts *testServer) metrics(t testing.TB) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := ts.http.Get(ts.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return fams
}

// value reads a counter, or a histogram's count, with label=val.
func value(fams map[string]*dto.MetricFamily, name, label, val string) float64 {
	for _, m := range fams[name].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == label && l.GetValue() == val {
				if h := m.GetHistogram(); h != nil {
					return float64(h.GetSampleCount())
				}
				return m.GetCounter().GetValue()
			}
		}
	}
	return -1
}

// TestBridgeHTTPS posts AdmissionReviews to a real HTTPS server on
// loopback, applies the patches as the apiserver would, and reads the
// metrics with a real parser.
func TestBridgeHTTPS(t *testing.T) {
	ts := startServer(t, func(c *Config) { c.MaxBodyBytes = 4096 })
	req := execRequest(t, "app", "env", k+"=chosen", "sh", "-c", "cat /run/secrets/token")
	code, out := ts.post(t, review(t, req))
	if code != http.StatusOK || out.Response == nil {
		t.Fatalf("HTTP %d %+v", code, out)
	}
	r := out.Response
	if out.APIVersion != "admission.k8s.io/v1" || out.Kind != "AdmissionReview" || r.UID != req.UID || !r.Allowed {
		t.Fatalf("response %+v", out)
	}
	id := r.AuditAnnotations[k]
	if len(r.AuditAnnotations) != 1 || !testutil.IsUUID(id) {
		t.Fatalf("audit annotations %v, want {%s: <uuid>}", r.AuditAnnotations, k)
	}
	if r.PatchType == nil || *r.PatchType != admissionv1.PatchTypeJSONPatch {
		t.Fatalf("patch type %v", r.PatchType)
	}
	want := []string{"env", k + "=" + id, "env", k + "=" + id, "sh", "-c", "cat /run/secrets/token"}
	if got := applyExec(t, req, r.Patch); !slices.Equal(got, want) {
		t.Errorf("command %q, want %q", got, want)
	}
	// A second exec gets another ID.
	_, out2 := ts.post(t, review(t, execRequest(t, "app", "sh")))
	if id2 := out2.Response.AuditAnnotations[k]; id2 == id || !testutil.IsUUID(id2) {
		t.Errorf("second ID %q after %q", id2, id)
	}
	// kubectl debug.
	eph := ephemeralRequest(t, debugPod("debugger"), debugPod())
	if _, out := ts.post(t, review(t, eph)); out.Response.Patch == nil || !testutil.IsUUID(out.Response.AuditAnnotations[k]) {
		t.Errorf("ephemeral container: %+v", out.Response)
	}
	// Unreadable reviews are allowed unchanged; the UID is kept when it
	// can be read.
	for _, body := range []string{`{"request":{"uid":"u-1","object":7}}`, `not json`, `{"kind":"AdmissionReview"}`} {
		code, out := ts.post(t, []byte(body))
		if code != http.StatusOK || !out.Response.Allowed || out.Response.Patch != nil {
			t.Errorf("%s: HTTP %d %+v", body, code, out)
		}
		if strings.Contains(body, "u-1") && out.Response.UID != "u-1" {
			t.Errorf("%s: uid %q", body, out.Response.UID)
		}
	}
	// Over the bound: 413, the failurePolicy decides.
	huge := execRequest(t, "app", "sh", "-c", strings.Repeat("x", 8192))
	if code, _ := ts.post(t, review(t, huge)); code != http.StatusRequestEntityTooLarge {
		t.Errorf("oversize review: HTTP %d", code)
	}
	if resp, err := ts.http.Get(ts.url + MutatePath); err != nil || resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET %s: %v %v", MutatePath, resp, err)
	}

	fams := ts.metrics(t)
	for _, c := range []struct {
		name, label, val string
		want             float64
	}{
		{"correlator_bridge_requests_total", "kind", "exec", 2},
		{"correlator_bridge_requests_total", "kind", "ephemeral", 1},
		{"correlator_bridge_requests_total", "kind", "other", 3},
		{"correlator_bridge_mutations_total", "kind", "exec", 2},
		{"correlator_bridge_mutations_total", "kind", "ephemeral", 1},
		{"correlator_bridge_errors_total", "reason", ErrMalformed, 2},
		{"correlator_bridge_skips_total", "reason", SkipNotHandled, 1},
		{"correlator_bridge_errors_total", "reason", ErrBodyTooLarge, 1},
		{"correlator_bridge_skips_total", "reason", SkipAttach, 0},
		{"correlator_bridge_caller_key_total", "action", KeyOverwritten, 1},
		{"correlator_bridge_request_duration_seconds", "kind", "exec", 2},
		{"correlator_bridge_cert_reloads_total", "result", "error", 0},
	} {
		if got := value(fams, c.name, c.label, c.val); got != c.want {
			t.Errorf("%s{%s=%q} = %v, want %v", c.name, c.label, c.val, got, c.want)
		}
	}
}

// TestBridgeCertRotation: a rotated certificate is served without a
// restart; a broken pair keeps the old one.
func TestBridgeCertRotation(t *testing.T) {
	ts := startServer(t, nil)
	c := ts.ca.client()
	serialIs := func(want int64) func() error {
		return func() error {
			got, err := c.serial(ts.addr)
			if err != nil {
				return err
			}
			if got != want {
				return fmt.Errorf("serving serial %d, want %d", got, want)
			}
			return nil
		}
	}
	testutil.EventuallyNil(t, serialIs(100))
	ts.ca.issue(t, 101, ts.certs[0], ts.certs[1])
	testutil.EventuallyNil(t, serialIs(101))

	// A certificate whose key is not yet written: keep serving 101.
	other := newTestCA(t)
	certFile, keyFile := certPaths(t)
	other.issue(t, 102, certFile, keyFile)
	b, err := os.ReadFile(certFile)
	if err != nil {
		t.Fatal(err)
	}
	writeAtomic(t, ts.certs[0], b)
	testutil.Eventually(t, "the broken pair is counted", func() bool {
		return value(ts.metrics(t), "correlator_bridge_cert_reloads_total", "result", "error") >= 1
	})
	if err := serialIs(101)(); err != nil {
		t.Error(err)
	}
	if got := value(ts.metrics(t), "correlator_bridge_cert_reloads_total", "result", "ok"); got != 1 {
		t.Errorf("ok reloads %v, want 1", got)
	}
	// The apiserver trusts only its caBundle: a client with another CA fails.
	if _, err := other.client().serial(ts.addr); err == nil {
		t.Error("a client trusting another CA connected")
	}
}

// TestBridgeMetricsListener: with MetricsListen, /metrics is plain HTTP on
// its own listener and not on the webhook's.
func TestBridgeMetricsListener(t *testing.T) {
	mln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ca := newTestCA(t)
	certFile, keyFile := certPaths(t)
	ca.issue(t, 1, certFile, keyFile)
	cfg := Default()
	cfg.CertFile, cfg.KeyFile, cfg.MetricsListen = certFile, keyFile, mln.Addr().String()
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	mut, _ := NewMutator(cfg.Key, nil, nil)
	srv, err := NewServer(cfg, NewHandler(mut, cfg.MaxBodyBytes, zerolog.Nop(), m), promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), zerolog.Nop(), m)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ctx, ln, mln) }()
	resp, err := http.Get("http://" + mln.Addr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !bytes.Contains(b, []byte("correlator_bridge_requests_total")) {
		t.Errorf("metrics listener page lacks the bridge metrics:\n%.300s", b)
	}
	cl := &http.Client{Transport: &http.Transport{TLSClientConfig: ca.client().cfg}}
	resp, err = cl.Get("https://" + ln.Addr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("/metrics on the webhook listener: HTTP %d, want 404", resp.StatusCode)
	}
	cancel()
	if err := <-errc; err != nil && !errors.Is(err, context.Canceled) {
		t.Error(err)
	}
}

func TestConfigValidate(t *testing.T) {
	ok := Default()
	ok.CertFile, ok.KeyFile = "c", "k"
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, edit := range map[string]func(*Config){
		"no cert":     func(c *Config) { c.CertFile = "" },
		"bad key":     func(c *Config) { c.Key = "A=B" },
		"no listen":   func(c *Config) { c.Listen = "" },
		"tiny body":   func(c *Config) { c.MaxBodyBytes = 10 },
		"no reload":   func(c *Config) { c.CertReload = 0 },
		"lookup ttl0": func(c *Config) { c.PodLookup, c.PodCacheTTL = true, 0 },
	} {
		c := ok
		edit(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
