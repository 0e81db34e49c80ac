package kubeapi

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	kubeapiservertesting "k8s.io/kubernetes/cmd/kube-apiserver/app/testing"
)

// A real kube-apiserver, in process, on a real etcd: RBAC, static tokens
// for the test's users, and the "cluster" egress through connectProxy so
// that pod proxy requests reach the agents on loopback.

// apiUser is a user of the static token file.
type apiUser struct{ name, token, groups string }

// apiServer is the running kube-apiserver.
type apiServer struct {
	// admin is the loopback client config (system:masters).
	admin  *rest.Config
	client kubernetes.Interface
	// egress routes the pod proxy's connections.
	egress *connectProxy
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("reserving a port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startEtcd runs an embedded etcd on loopback ports in a temporary directory.
func startEtcd(t *testing.T) string {
	t.Helper()
	cfg := embed.NewConfig()
	cfg.Name = "kubeapi"
	cfg.Dir = filepath.Join(t.TempDir(), "etcd")
	cu := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", freePort(t))}
	pu := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", freePort(t))}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{cu}, []url.URL{cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{pu}, []url.URL{pu}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.LogLevel = "error"
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatalf("starting etcd: %v", err)
	}
	t.Cleanup(e.Close)
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(60 * time.Second):
		t.Fatal("starting etcd: not ready after 60s")
	}
	return cu.String()
}

// startAPIServer starts kube-apiserver with RBAC, users' static tokens
// and the cluster egress through a CONNECT proxy on a unix socket; extra
// flags (audit, say) are added to those.
func startAPIServer(t *testing.T, users []apiUser, extra ...string) *apiServer {
	t.Helper()
	dir := t.TempDir()
	etcdURL := startEtcd(t)

	var tokens strings.Builder
	for _, u := range users {
		fmt.Fprintf(&tokens, "%s,%s,uid-%s,%q\n", u.token, u.name, u.name, u.groups)
	}
	tokenFile := filepath.Join(dir, "tokens.csv")
	writeFile(t, tokenFile, tokens.String())

	// What konnectivity does in a real cluster: the apiserver reaches pods
	// through an HTTP CONNECT proxy. Here the proxy maps each pod's
	// address to its agent's loopback port.
	sock := filepath.Join(dir, "egress.sock")
	egress := &connectProxy{routes: map[string]string{}}
	egress.serve(t, sock)
	egressFile := filepath.Join(dir, "egress.yaml")
	writeFile(t, egressFile, fmt.Sprintf(`apiVersion: apiserver.k8s.io/v1beta1
kind: EgressSelectorConfiguration
egressSelections:
- name: cluster
  connection:
    proxyProtocol: HTTPConnect
    transport:
      uds:
        udsName: %s
`, sock))

	storage := storagebackend.NewDefaultConfig("/kubeapi-registry", nil)
	storage.Transport.ServerList = []string{etcdURL}
	flags := []string{
		"--authorization-mode=RBAC",
		"--token-auth-file=" + tokenFile,
		"--egress-selector-config-file=" + egressFile,
	}
	flags = append(flags, extra...)
	server := kubeapiservertesting.StartTestServerOrDie(t, nil, flags, storage)
	t.Cleanup(server.TearDownFn)

	admin := rest.CopyConfig(server.ClientConfig)
	// JSON, so the apiserver's errors read as Status objects.
	admin.ContentType, admin.AcceptContentTypes = "application/json", "application/json"
	client, err := kubernetes.NewForConfig(admin)
	if err != nil {
		t.Fatalf("building the admin client: %v", err)
	}
	return &apiServer{admin: admin, client: client, egress: egress}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatalf("writing %s: %v", path, err)
	}
}

// connectProxy is a minimal HTTP CONNECT proxy on a unix socket, the
// apiserver's "cluster" egress. It dials only the routes it was given
// (pod IP:port to a loopback address); any other target is refused.
type connectProxy struct {
	mu     sync.Mutex
	routes map[string]string
	// dialed counts the connections made per pod address.
	dialed map[string]int
}

// route sends podAddr (podIP:port) to the loopback address target.
func (p *connectProxy) route(podAddr, target string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.routes[podAddr] = target
}

// dials is how many connections reached podAddr.
func (p *connectProxy) dials(podAddr string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.dialed[podAddr]
}

func (p *connectProxy) serve(t *testing.T, sock string) {
	t.Helper()
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatalf("listening on %s: %v", sock, err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.handle(c)
		}
	}()
}

func (p *connectProxy) handle(c net.Conn) {
	defer c.Close()
	br := bufio.NewReader(c)
	req, err := http.ReadRequest(br)
	if err != nil {
		return
	}
	if req.Method != http.MethodConnect {
		io.WriteString(c, "HTTP/1.1 405 Method Not Allowed\r\n\r\n")
		return
	}
	p.mu.Lock()
	target, ok := p.routes[req.Host]
	if ok {
		if p.dialed == nil {
			p.dialed = map[string]int{}
		}
		p.dialed[req.Host]++
	}
	p.mu.Unlock()
	if !ok {
		io.WriteString(c, "HTTP/1.1 403 Forbidden\r\n\r\n")
		return
	}
	up, err := net.DialTimeout("tcp", target, 5*time.Second)
	if err != nil {
		io.WriteString(c, "HTTP/1.1 503 Service Unavailable\r\n\r\n")
		return
	}
	defer up.Close()
	io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n")
	done := make(chan struct{}, 2)
	go func() { io.Copy(up, br); done <- struct{}{} }()
	go func() { io.Copy(c, up); done <- struct{}{} }()
	<-done
}
