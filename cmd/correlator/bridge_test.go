package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"

	"github.com/execid/correlator/internal/testutil"
	"github.com/execid/correlator/pkg/bridge"
	"github.com/execid/correlator/pkg/vocab"
)

// selfSigned writes a certificate for 127.0.0.1 and its key.
func selfSigned(t *testing.T) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	for f, b := range map[string][]byte{
		certFile: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		keyFile:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}),
	} {
		if err := os.WriteFile(f, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cert, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

func loopbackAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// TestBridgeCommand runs `correlator bridge` as the chart does and posts
// an exec's AdmissionReview to it.
func TestBridgeCommand(t *testing.T) {
	certFile, keyFile, pool := selfSigned(t)
	addr, maddr := loopbackAddr(t), loopbackAddr(t)
	cmd := newBridgeCmd(&globalOptions{logLevel: "error"})
	cmd.SetArgs([]string{"--listen", addr, "--tls-cert", certFile, "--tls-key", keyFile, "--metrics-listen", maddr, "--key", "MY_EXEC_ID"})
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() { errc <- cmd.ExecuteContext(ctx) }()
	defer func() {
		cancel()
		if err := <-errc; err != nil {
			t.Errorf("bridge: %v", err)
		}
	}()

	body := `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u-7",
	"kind":{"group":"","version":"v1","kind":"PodExecOptions"},"resource":{"group":"","version":"v1","resource":"pods"},
	"subResource":"exec","name":"web-0","namespace":"shop","operation":"CONNECT","userInfo":{"username":"alice"},
	"object":{"kind":"PodExecOptions","apiVersion":"v1","container":"app","command":["sh"]}}}`
	cl := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	var out admissionv1.AdmissionReview
	testutil.EventuallyNil(t, func() error {
		resp, err := cl.Post("https://"+addr+bridge.MutatePath, "application/json", strings.NewReader(body))
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("HTTP %d: %s", resp.StatusCode, b)
		}
		return json.Unmarshal(b, &out)
	})
	r := out.Response
	if r == nil || r.UID != "u-7" || !r.Allowed || !testutil.IsUUID(r.AuditAnnotations["MY_EXEC_ID"]) ||
		!bytes.Contains(r.Patch, []byte(`"MY_EXEC_ID=`+r.AuditAnnotations["MY_EXEC_ID"]+`"`)) {
		t.Fatalf("response %+v", r)
	}
	resp, err := http.Get("http://" + maddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !bytes.Contains(b, []byte(`correlator_bridge_mutations_total{kind="exec"} 1`)) {
		t.Errorf("metrics lack the mutation:\n%.400s", b)
	}
}

func TestBridgeCommandRefuses(t *testing.T) {
	certFile, keyFile, _ := selfSigned(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--listen", "127.0.0.1:0"}, "HTTPS only"},
		{[]string{"--tls-cert", certFile, "--tls-key", keyFile, "--key", "A=B"}, "invalid bridge key"},
		{[]string{"--tls-cert", certFile, "--tls-key", certFile, "--listen", "127.0.0.1:0"}, "loading certificate"},
	} {
		cmd := newBridgeCmd(&globalOptions{logLevel: "error"})
		cmd.SetArgs(c.args)
		cmd.SetOut(io.Discard)
		cmd.SetErr(io.Discard)
		if err := cmd.ExecuteContext(t.Context()); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want an error saying %q", c.args, err, c.want)
		}
	}
	if vocab.BridgeKey != bridge.Default().Key {
		t.Errorf("default key %q, vocab %q", bridge.Default().Key, vocab.BridgeKey)
	}
}
