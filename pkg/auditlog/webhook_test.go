package auditlog

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"
)

// mergeSink feeds a Merger under a lock, like the pipeline will.
type mergeSink struct {
	mu sync.Mutex
	m  *Merger
}

func (s *mergeSink) sink(_ context.Context, evs []Event) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ev := range evs {
		s.m.Add(ev)
	}
	return nil
}

func post(t *testing.T, c *http.Client, url, token string, body []byte) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// eventList builds an apiserver webhook body from sample lines: items lose
// kind and apiVersion exactly as LegacyCodec writes them.
func eventList(lines ...string) []byte {
	var b strings.Builder
	b.WriteString(`{"kind":"EventList","apiVersion":"audit.k8s.io/v1","metadata":{},"items":[`)
	for i, l := range lines {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString("{" + strings.TrimPrefix(strings.TrimSpace(l), `{"kind":"Event","apiVersion":"audit.k8s.io/v1",`))
	}
	b.WriteString("]}\n")
	return []byte(b.String())
}

func stageLine(id, stage string) string {
	return strings.Replace(execLine(id, 0), `"stage":"ResponseStarted"`, `"stage":"`+stage+`"`, 1)
}

func TestWebhookOutOfOrderAndRedelivered(t *testing.T) {
	reg := prometheus.NewRegistry()
	metrics, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	s := &mergeSink{m: NewMerger(MergerConfig{})}
	srv := httptest.NewServer(NewWebhookHandler(WebhookConfig{BearerToken: "s3cret"}, s.sink, zerolog.Nop(), metrics))
	defer srv.Close()

	late := eventList(stageLine("a", StageResponseComplete), stageLine("b", StageResponseStarted))
	early := eventList(stageLine("a", StageRequestReceived), stageLine("a", StageResponseStarted))
	for _, body := range [][]byte{late, early, late} { // out of order, then a redelivery
		if code := post(t, srv.Client(), srv.URL, "s3cret", body); code != http.StatusOK {
			t.Fatalf("POST = %d", code)
		}
	}
	// JSONL and a bare Event are accepted too.
	if code := post(t, srv.Client(), srv.URL, "s3cret", []byte(stageLine("c", StageResponseStarted)+stageLine("d", StageResponseStarted))); code != http.StatusOK {
		t.Fatalf("JSONL POST = %d", code)
	}
	st := s.m.Stats()
	if st.Records != 4 || st.Duplicates != 2 {
		t.Fatalf("merger stats %+v, want 4 records and 2 duplicates", st)
	}
	a := s.m.Lookup("a")[0]
	if len(a.Stages) != 3 || !a.Complete() {
		t.Fatalf("record a stages %v", a.Stages)
	}
	if got := testutil.ToFloat64(metrics.webhookRequests.WithLabelValues(resultOK)); got != 4 {
		t.Fatalf("ok requests metric = %v", got)
	}
	if got := testutil.ToFloat64(metrics.recordsRead.WithLabelValues("webhook")); got != 8 {
		t.Fatalf("records read metric = %v", got)
	}
}

// TestWebhookRefusals: each refusal has its status, and every one that
// refuses evidence from an accepted sender moves
// correlator_audit_webhook_refused_total for its reason, and only that.
func TestWebhookRefusals(t *testing.T) {
	var refuse error
	sink := func(context.Context, []Event) error { return refuse }
	m := newTestMetrics(t)
	h := NewWebhookHandler(WebhookConfig{BearerToken: "s3cret", MaxBodyBytes: 4096}, sink, zerolog.Nop(), m)
	srv := httptest.NewServer(h)
	defer srv.Close()
	c := srv.Client()
	ok := eventList(stageLine("a", StageResponseStarted))
	for _, tc := range []struct {
		name, token string
		body        []byte
		refuse      error
		want        int
		reason      string // refusal counted; "" for none
	}{
		{"accepted", "s3cret", ok, nil, 200, ""},
		{"no token", "", ok, nil, 401, ""},
		{"wrong token", "s3cret!", ok, nil, 401, ""},
		{"too large", "s3cret", eventList(strings.Repeat(stageLine("a", StageResponseStarted)+"\n", 40)), nil, 413, refusedTooLarge},
		{"bad json", "s3cret", []byte(`{"kind":"EventList","items":[{"auditID":`), nil, 400, refusedUndecodable},
		{"not events", "s3cret", []byte(`{"kind": 0}`), nil, 400, refusedUndecodable},
		{"sink busy", "s3cret", ok, ErrBusy, 429, refusedBusy},
		{"sink down", "s3cret", ok, errors.New("queue closed"), 503, refusedSinkError},
		{"empty list", "s3cret", []byte(`{"kind":"EventList","apiVersion":"audit.k8s.io/v1","metadata":{},"items":[]}`), nil, 200, ""},
	} {
		refuse = tc.refuse
		before := refusals(m)
		if got := post(t, c, srv.URL, tc.token, tc.body); got != tc.want {
			t.Errorf("%s: status %d, want %d", tc.name, got, tc.want)
		}
		after := refusals(m)
		for _, r := range refusalReasons {
			want := before[r]
			if r == tc.reason {
				want++
			}
			if after[r] != want {
				t.Errorf("%s: correlator_audit_webhook_refused_total{reason=%q} moved from %v to %v, want %v", tc.name, r, before[r], after[r], want)
			}
		}
	}
	resp, err := c.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET = %d", resp.StatusCode)
	}
}

// refusals reads correlator_audit_webhook_refused_total by reason.
func refusals(m *Metrics) map[string]float64 {
	out := map[string]float64{}
	for _, r := range refusalReasons {
		out[r] = testutil.ToFloat64(m.webhookRefused.WithLabelValues(r))
	}
	return out
}

// TestWebhookClientCert serves over a real TLS socket on 127.0.0.1 and
// requires a client certificate from the configured CA.
func TestWebhookClientCert(t *testing.T) {
	dir := t.TempDir()
	ca, caKey := newCA(t, "audit-ca")
	other, otherKey := newCA(t, "other-ca")
	writePEM(t, filepath.Join(dir, "ca.pem"), "CERTIFICATE", ca.Raw)
	srvCert, srvKey := leaf(t, ca, caKey, "127.0.0.1", true)
	writePEM(t, filepath.Join(dir, "srv.pem"), "CERTIFICATE", srvCert.Certificate[0])
	writePEM(t, filepath.Join(dir, "srv.key"), "PRIVATE KEY", srvKey)

	ws, err := NewWebhookServer(WebhookConfig{TLSCertFile: filepath.Join(dir, "srv.pem"), TLSKeyFile: filepath.Join(dir, "srv.key"),
		ClientCAFile: filepath.Join(dir, "ca.pem")}, zerolog.Nop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	addr, col := serveWebhook(t, ws)
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	client := func(cert *tls.Certificate) *http.Client {
		cfg := &tls.Config{RootCAs: roots}
		if cert != nil {
			cfg.Certificates = []tls.Certificate{*cert}
		}
		return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
	}
	url := "https://" + addr + "/"
	good, _ := leaf(t, ca, caKey, "kube-apiserver", false)
	if code := post(t, client(&good), url, "", eventList(stageLine("tls", StageResponseStarted))); code != 200 || col.count() != 1 {
		t.Fatalf("with a good client cert: %d, %d events", code, col.count())
	}
	bad, _ := leaf(t, other, otherKey, "kube-apiserver", false)
	for name, cert := range map[string]*tls.Certificate{"no cert": nil, "wrong CA": &bad} {
		req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(eventList(stageLine("x", StageResponseStarted))))
		resp, err := client(cert).Do(req)
		if err == nil {
			resp.Body.Close()
			t.Errorf("%s: accepted with %d", name, resp.StatusCode)
		}
	}
	if col.count() != 1 {
		t.Fatalf("refused clients delivered events")
	}
}

func newCA(t *testing.T, name string) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return cert, key
}

func leaf(t *testing.T, ca *x509.Certificate, caKey *ecdsa.PrivateKey, name string, server bool) (tls.Certificate, []byte) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.ParseIP(name)}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalPKCS8PrivateKey(key)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, keyDER
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// serveWebhook runs ws on a loopback port until the test ends, and returns
// its address and the collector its sink feeds.
func serveWebhook(t *testing.T, ws *WebhookServer) (string, *collector) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	col := newCollector()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ws.Serve(ctx, ln, col.sink) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return ln.Addr().String(), col
}
