package kubeapi

import (
	"context"
	"errors"
	"net"
	"net/http"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/execid/correlator/pkg/api"
	"github.com/execid/correlator/pkg/store"
	"github.com/execid/correlator/pkg/store/sqlite"
)

// A node agent's API as `correlator run --auth-kubernetes` serves it: the
// SQLite store, the API handler and server, and Kubernetes authentication
// (TokenReview, SubjectAccessReview) against the real apiserver with the
// agent's own service account token.

// agent is one node's agent API on a loopback port.
type agent struct {
	node string
	addr string
	srv  *api.Server
	// seen records who the agent authenticated.
	seen *authLog
}

// authLog wraps the agent's authenticator and records each decision.
type authLog struct {
	inner api.Authenticator
	mu    sync.Mutex
	calls []authCall
}

type authCall struct {
	user string
	err  error
	// authorization is whether the request still carried Authorization
	// (kube-apiserver's proxy removes it).
	authorization bool
}

func (a *authLog) Authenticate(r *http.Request) (string, error) {
	user, err := a.inner.Authenticate(r)
	a.mu.Lock()
	a.calls = append(a.calls, authCall{user: user, err: err, authorization: r.Header.Get("Authorization") != ""})
	a.mu.Unlock()
	return user, err
}

// since returns the decisions made after the first n.
func (a *authLog) since(n int) []authCall {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]authCall(nil), a.calls[min(n, len(a.calls)):]...)
}

func (a *authLog) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.calls)
}

// agentCredential is the agent's service account token (correlator/
// correlator, bound to rbac.yaml's correlator-agent role), as the
// kubelet would project it, and a client trusting the apiserver's CA.
func agentCredential(t *testing.T, s *apiServer) (string, *http.Client) {
	t.Helper()
	tr, err := s.client.CoreV1().ServiceAccounts("correlator").CreateToken(context.Background(), "correlator",
		&authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("minting the agent's service account token: %v", err)
	}
	cfg := rest.AnonymousClientConfig(s.admin)
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatalf("building the agent's apiserver client: %v", err)
	}
	return tr.Status.Token, client
}

// startAgent opens a SQLite store in a temporary directory, writes b
// through the store, and serves the API on 127.0.0.1 with Kubernetes
// authentication.
func startAgent(t *testing.T, s *apiServer, node string, b store.Batch) *agent {
	t.Helper()
	ctx := context.Background()
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel).With().Str("node", node).Logger()
	db, err := sqlite.Open(filepath.Join(t.TempDir(), "correlator.db"), sqlite.DefaultConfig(), log)
	if err != nil {
		t.Fatalf("%s: opening the store: %v", node, err)
	}
	t.Cleanup(func() { db.Close() })
	if err := db.Write(ctx, b); err != nil {
		t.Fatalf("%s: writing the fixtures: %v", node, err)
	}

	token, client := agentCredential(t, s)
	seen := &authLog{inner: &api.KubeReview{Server: s.admin.Host, Client: client, Token: token,
		CacheTTL: 30 * time.Second, Audiences: []string{api.TokenAudience}}}
	srv := api.NewServer(api.NewHandler(db, api.Config{Auth: seen}, log), api.ServerConfig{Addr: "127.0.0.1:0"})
	ln, err := srv.Listen()
	if err != nil {
		t.Fatalf("%s: %v", node, err)
	}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("%s: serving the API: %v", node, err)
		}
	}()
	a := &agent{node: node, addr: ln.Addr().(*net.TCPAddr).String(), srv: srv, seen: seen}
	t.Cleanup(a.stop)
	return a
}

// stop shuts the agent's API down, as when its node goes away.
func (a *agent) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	a.srv.Shutdown(ctx)
}
