package kubeapi

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"io"
	"math/big"
	"net"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	remotecommandconsts "k8s.io/apimachinery/pkg/util/remotecommand"
	"k8s.io/client-go/tools/remotecommand"
	remotecommandserver "k8s.io/kubelet/pkg/cri/streaming/remotecommand"
)

// A fake kubelet: the kubelet's own exec endpoint (/exec/{ns}/{pod}/
// {container}, served by k8s's remotecommand server, SPDY and WebSocket),
// with an executor that runs nothing: it records the argv it was asked
// to run and writes it to stdout as JSON, so kubectl prints it.

// kubeletExec is one exec the kubelet was asked to run.
type kubeletExec struct {
	Namespace, Pod, Container string
	Command                   []string
}

// kubelet is the fake kubelet on a loopback TLS port.
type kubelet struct {
	addr  string
	mu    sync.Mutex
	execs []kubeletExec
}

// all returns the execs received so far.
func (k *kubelet) all() []kubeletExec {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Clone(k.execs)
}

// count is how many execs were received.
func (k *kubelet) count() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.execs)
}

// podExecutor is the executor for one request's pod and container.
type podExecutor struct {
	k                         *kubelet
	namespace, pod, container string
}

func (e podExecutor) ExecInContainer(_ context.Context, _ string, _ types.UID, _ string, cmd []string,
	_ io.Reader, out, _ io.WriteCloser, _ bool, _ <-chan remotecommand.TerminalSize, _ time.Duration) error {
	e.k.mu.Lock()
	e.k.execs = append(e.k.execs, kubeletExec{Namespace: e.namespace, Pod: e.pod, Container: e.container,
		Command: slices.Clone(cmd)})
	e.k.mu.Unlock()
	if out == nil {
		return nil
	}
	return json.NewEncoder(out).Encode(cmd)
}

// startKubelet serves the exec endpoint with a self-signed certificate
// (kube-apiserver without --kubelet-certificate-authority does not check
// it, as on kubeadm's default).
func startKubelet(t *testing.T) *kubelet {
	t.Helper()
	k := &kubelet{}
	mux := http.NewServeMux()
	mux.HandleFunc("/exec/{ns}/{pod}/{container}", func(w http.ResponseWriter, r *http.Request) {
		opts, err := remotecommandserver.NewOptions(r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		e := podExecutor{k: k, namespace: r.PathValue("ns"), pod: r.PathValue("pod"), container: r.PathValue("container")}
		remotecommandserver.ServeExec(w, r, e, e.pod, "", e.container, r.URL.Query()["command"], opts,
			time.Minute, 30*time.Second, remotecommandconsts.SupportedStreamingProtocols)
	})
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{selfSignedCert(t)},
		NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatalf("kubelet: listening: %v", err)
	}
	// HTTP/1.1 only: exec upgrades the connection.
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second,
		TLSNextProto: map[string]func(*http.Server, *tls.Conn, http.Handler){}}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("kubelet: serving: %v", err)
		}
	}()
	t.Cleanup(func() { srv.Close() })
	k.addr = ln.Addr().String()
	return k
}

// selfSignedCert is a throwaway serving certificate.
func selfSignedCert(t *testing.T) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("kubelet key: %v", err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), IPAddresses: []net.IP{net.IPv4(192, 0, 2, 1)},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatalf("kubelet certificate: %v", err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// createKubeletNode registers node with ip as its InternalIP and port as
// its kubelet port: where kube-apiserver sends the node's execs.
func createKubeletNode(t *testing.T, s *apiServer, node, ip string, port int32) {
	t.Helper()
	ctx := context.Background()
	n, err := s.client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}},
		metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating node %s: %v", node, err)
	}
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}}
	n.Status.DaemonEndpoints.KubeletEndpoint.Port = port
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	if _, err := s.client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("setting node %s's address: %v", node, err)
	}
}
