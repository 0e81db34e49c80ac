package delivery

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/execid/correlator/pkg/alert"
	"github.com/execid/correlator/pkg/store"
)

// nastyAlerts are real engine output for inputs full of characters that
// syslog, CEF and JSON must escape.
func nastyAlerts(t testing.TB) []store.Alert {
	t.Helper()
	s := session()
	s.Namespace, s.Pod = "kube-system", "etcd-0"
	s.User.Username = `mallory"]\ |=x`
	s.Command = []string{"sh", "-c", "echo a|b=c\\d]\n$(X) \xff"}
	p := process()
	p.Flags = []string{"env_mismatch"}
	p.Namespace, p.Pod = "kube-system", "etcd-0"
	a := newTestEngine(t).Evaluate(alert.Input{Session: s, Process: p}, t0)
	if len(a) != 2 {
		t.Fatalf("want 2 alerts, got %d", len(a))
	}
	return a
}

func TestSyslogStream(t *testing.T) {
	for _, network := range []string{"tcp", "tls"} {
		for _, format := range []string{FormatRFC5424, FormatCEF} {
			t.Run(network+"/"+format, func(t *testing.T) {
				var ln net.Listener
				var err error
				opts := SinkOptions{Host: "node-1", Version: "1.2|3"}
				if network == "tls" {
					cert, pool := selfSigned(t)
					ln, err = tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
					opts.TLSConfig = &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"}
				} else {
					ln, err = net.Listen("tcp", "127.0.0.1:0")
				}
				if err != nil {
					t.Fatal(err)
				}
				defer ln.Close()
				got := make(chan []byte, 10)
				go func() {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					defer c.Close()
					r := bufio.NewReader(c)
					for {
						m, err := readOctetCounted(r)
						if err != nil {
							close(got)
							return
						}
						got <- m
					}
				}()
				spec, err := ParseSinkSpec("syslog+" + network + "://" + ln.Addr().String() + "?format=" + format + "&facility=auth")
				if err != nil {
					t.Fatal(err)
				}
				d, err := NewDeliverer(spec, opts, zerolog.Nop())
				if err != nil {
					t.Fatal(err)
				}
				alerts := nastyAlerts(t)
				if err := d.Deliver(context.Background(), alerts); err != nil {
					t.Fatal(err)
				}
				for i := range alerts {
					checkSyslog(t, <-got, &alerts[i], format, 4)
				}
				d.Close()
			})
		}
	}
}

func TestSyslogUDP(t *testing.T) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	spec, _ := ParseSinkSpec("syslog+udp://" + pc.LocalAddr().String())
	d, err := NewDeliverer(spec, SinkOptions{Host: "node-1"}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	alerts := nastyAlerts(t)
	if err := d.Deliver(context.Background(), alerts); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 70000)
	for i := range alerts {
		pc.SetReadDeadline(time.Now().Add(10 * time.Second))
		n, _, err := pc.ReadFrom(buf)
		if err != nil {
			t.Fatal(err)
		}
		checkSyslog(t, buf[:n], &alerts[i], FormatRFC5424, 16)
	}
}

func checkSyslog(t *testing.T, raw []byte, a *store.Alert, format string, facility int) {
	t.Helper()
	m, err := parseRFC5424(raw)
	if err != nil {
		t.Fatalf("not strict RFC 5424: %v\n%q", err, raw)
	}
	if m.Pri != facility*8+syslogSeverity(a.Severity) || m.Host != "node-1" || m.App != "correlator" || m.MsgID != a.Rule {
		t.Errorf("header %+v", m)
	}
	if ts, err := time.Parse(time.RFC3339Nano, m.Timestamp); err != nil || !ts.Equal(a.Time) {
		t.Errorf("timestamp %q, want %v", m.Timestamp, a.Time)
	}
	sd := m.SD[sdID]
	if sd["id"] != a.ID || sd["rule"] != a.Rule || sd["auditID"] != a.AuditID || sd["user"] != `mallory"]\ |=x` {
		t.Errorf("structured data %v", sd)
	}
	if !m.BOM {
		t.Error("no BOM before a UTF-8 MSG")
	}
	if format == FormatRFC5424 {
		if m.Msg != strings.ToValidUTF8(a.Message, "\uFFFD") {
			t.Errorf("MSG %q, want %q", m.Msg, a.Message)
		}
		return
	}
	hdr, ext, err := splitCEF(m.Msg)
	if err != nil {
		t.Fatalf("bad CEF: %v\n%q", err, m.Msg)
	}
	want := []string{"0", "correlator", "correlator", "1.2|3", a.Rule, strings.NewReplacer("\n", " ").Replace(strings.ToValidUTF8(a.Message, "\uFFFD"))}
	for i, w := range want {
		if hdr[i] != w {
			t.Errorf("CEF header %d = %q, want %q", i, hdr[i], w)
		}
	}
	if hdr[6] != "5" && hdr[6] != "8" {
		t.Errorf("CEF severity %q", hdr[6])
	}
	if ext["externalId"] != a.ID || ext["suser"] != `mallory"]\ |=x` || ext["cs1"] != a.AuditID ||
		ext["cs6"] != "sh -c echo a|b=c\\d]\n$(X) \uFFFD" {
		t.Errorf("CEF extension %v", ext)
	}
}

func selfSigned(t *testing.T) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(c)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, pool
}

func TestWebhookAndHEC(t *testing.T) {
	dir := t.TempDir()
	tokFile := filepath.Join(dir, "token")
	os.WriteFile(tokFile, []byte("# comment\ns3cret-token\n"), 0o600)
	type got struct {
		auth, ctype string
		body        []byte
	}
	ch := make(chan got, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b := make([]byte, 1<<20)
		n, _ := r.Body.Read(b)
		for n < int(r.ContentLength) {
			m, err := r.Body.Read(b[n:])
			n += m
			if err != nil {
				break
			}
		}
		ch <- got{r.Header.Get("Authorization"), r.Header.Get("Content-Type"), b[:n]}
	}))
	defer srv.Close()
	alerts := nastyAlerts(t)

	spec, _ := ParseSinkSpec("webhook:" + srv.URL + "/alerts?key=abc")
	if n := spec.String(); strings.Contains(n, "abc") || strings.Contains(n, "alerts") {
		t.Errorf("sink name %q shows the query or the path", n)
	}
	d, err := NewDeliverer(spec, SinkOptions{TokenFile: tokFile}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Deliver(context.Background(), alerts); err != nil {
		t.Fatal(err)
	}
	g := <-ch
	if g.auth != "Bearer s3cret-token" || g.ctype != "application/json" {
		t.Errorf("webhook headers %q %q", g.auth, g.ctype)
	}
	var arr []store.Alert
	if err := json.Unmarshal(g.body, &arr); err != nil || len(arr) != 2 || arr[0].ID != alerts[0].ID || arr[1].Message != alerts[1].Message {
		t.Errorf("webhook body: %v %s", err, g.body)
	}

	spec, _ = ParseSinkSpec("splunk-hec:" + srv.URL + "/services/collector/event")
	d, err = NewDeliverer(spec, SinkOptions{TokenFile: tokFile, Host: "node-1"}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Deliver(context.Background(), alerts); err != nil {
		t.Fatal(err)
	}
	g = <-ch
	if g.auth != "Splunk s3cret-token" {
		t.Errorf("HEC auth %q", g.auth)
	}
	dec := json.NewDecoder(strings.NewReader(string(g.body)))
	dec.DisallowUnknownFields()
	for i := range alerts {
		var ev struct {
			Time       float64     `json:"time"`
			Host       string      `json:"host"`
			Source     string      `json:"source"`
			Sourcetype string      `json:"sourcetype"`
			Event      store.Alert `json:"event"`
		}
		if err := dec.Decode(&ev); err != nil {
			t.Fatalf("HEC event %d: %v", i, err)
		}
		if ev.Source != "correlator" || ev.Sourcetype != "correlator:alert" || ev.Host != "node-1" ||
			ev.Event.ID != alerts[i].ID || ev.Time != float64(t0.Unix()) {
			t.Errorf("HEC event %+v", ev)
		}
	}
	if dec.More() {
		t.Error("extra HEC events")
	}
}

func TestHTTPStatusHandling(t *testing.T) {
	status := http.StatusBadRequest
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(status) }))
	defer srv.Close()
	spec, _ := ParseSinkSpec("webhook:" + srv.URL + "/?token=hunter2")
	d, _ := NewDeliverer(spec, SinkOptions{}, zerolog.Nop())
	err := d.Deliver(context.Background(), nastyAlerts(t))
	if err == nil || !strings.Contains(err.Error(), "400") || !isRejected(err) {
		t.Errorf("400: %v", err)
	}
	status = http.StatusServiceUnavailable
	err = d.Deliver(context.Background(), nastyAlerts(t))
	if err == nil || isRejected(err) {
		t.Errorf("503 must be retried: %v", err)
	}
	srv.Close()
	err = d.Deliver(context.Background(), nastyAlerts(t))
	if err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("connection error %v (must not show the query)", err)
	}
}

func isRejected(err error) bool {
	return err != nil && strings.Contains(err.Error(), ErrRejected.Error())
}

func TestFileSink(t *testing.T) {
	p := filepath.Join(t.TempDir(), "alerts.jsonl")
	spec, _ := ParseSinkSpec("file:" + p)
	d, err := NewDeliverer(spec, SinkOptions{}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	alerts := nastyAlerts(t)
	d.Deliver(context.Background(), alerts[:1])
	d.Deliver(context.Background(), alerts[1:])
	d.Close()
	d, _ = NewDeliverer(spec, SinkOptions{}, zerolog.Nop()) // appends, never truncates
	d.Deliver(context.Background(), alerts[:1])
	d.Close()
	b, _ := os.ReadFile(p)
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d lines", len(lines))
	}
	for i, l := range lines {
		var a store.Alert
		if err := json.Unmarshal([]byte(l), &a); err != nil || a.ID != alerts[[]int{0, 1, 0}[i]].ID {
			t.Errorf("line %d: %v %s", i, err, l)
		}
	}
}
