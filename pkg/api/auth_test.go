package api

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"

	"github.com/execid/correlator/pkg/authn"
)

func reqWith(token string) *http.Request {
	r := httptest.NewRequest(http.MethodGet, "/api/v1/sessions", nil)
	if token != "" {
		r.Header.Set("Authorization", "Bearer "+token)
	}
	return r
}

func TestTokenFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(path, []byte("# responders\ns3cret-token-one\n\ns3cret-token-two\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tf, err := openTokens(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		token string
		ok    bool
	}{{"s3cret-token-one", true}, {"s3cret-token-two", true}, {"s3cret-token", false}, {"", false}, {"# responders", false}} {
		_, err := tf.Authenticate(reqWith(tc.token))
		if (err == nil) != tc.ok {
			t.Errorf("token %q: err %v, want ok=%v", tc.token, err, tc.ok)
		}
	}
	// A rotated file takes effect without a restart (the source looks
	// at the file on every request here).
	if err := os.WriteFile(path, []byte("rotated-token-0001\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := tf.Authenticate(reqWith("s3cret-token-one")); !errors.Is(err, ErrUnauthenticated) {
		t.Errorf("old token still accepted after rotation: %v", err)
	}
	if _, err := tf.Authenticate(reqWith("rotated-token-0001")); err != nil {
		t.Errorf("rotated token refused: %v", err)
	}
	if _, err := openTokens(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("missing token file accepted")
	}
	empty := filepath.Join(t.TempDir(), "empty")
	os.WriteFile(empty, []byte("\n# nothing\n"), 0o600)
	if _, err := openTokens(empty); err == nil {
		t.Error("token file without tokens accepted")
	}
}

// TestTokenAuthRevocation: emptying the shared token file revokes every
// token at once; it never falls back to the tokens read before.
func TestTokenAuthRevocation(t *testing.T) {
	const tok = "responder-token-0001"
	path := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(path, []byte(tok+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := authn.Open(path, authn.Config{MinLength: authn.DefaultMinLength, CheckMode: true}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	ta := NewTokenAuth(f)
	if _, err := ta.Authenticate(reqWith(tok)); err != nil {
		t.Fatalf("token refused: %v", err)
	}
	if err := os.WriteFile(path, []byte("# revoked\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ta.Authenticate(reqWith(tok)); err == nil {
		t.Fatal("revoked token still accepted")
	}
	if err := os.WriteFile(path, []byte("# back\n"+tok+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ta.Authenticate(reqWith(tok)); err != nil {
		t.Fatalf("restored token refused: %v", err)
	}
}

const readerSA = "system:serviceaccount:correlator:correlator-reader"

// kubeDouble is a test double of kube-apiserver's TokenReview and
// SubjectAccessReview endpoints.
func kubeDouble(t *testing.T, calls *atomic.Int32, fail *atomic.Bool) *httptest.Server {
	return httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		if r.Header.Get("Authorization") != "Bearer agent-sa-token" {
			http.Error(w, "agent not authenticated", http.StatusUnauthorized)
			return
		}
		if fail.Load() {
			http.Error(w, "etcd is on fire", http.StatusInternalServerError)
			return
		}
		switch r.URL.Path {
		case "/apis/authentication.k8s.io/v1/tokenreviews":
			var tr authnv1.TokenReview
			json.NewDecoder(r.Body).Decode(&tr)
			switch tr.Spec.Token {
			case "alice-token":
				tr.Status = authnv1.TokenReviewStatus{Authenticated: true, User: authnv1.UserInfo{Username: "alice", Groups: []string{"sre"}}}
			case "bob-token":
				tr.Status = authnv1.TokenReviewStatus{Authenticated: true, User: authnv1.UserInfo{Username: "bob"}}
			case "reader-token": // minted with the audience "correlator" only
				if slices.Equal(tr.Spec.Audiences, []string{TokenAudience}) {
					tr.Status = authnv1.TokenReviewStatus{Authenticated: true, Audiences: tr.Spec.Audiences,
						User: authnv1.UserInfo{Username: readerSA}}
				}
			}
			json.NewEncoder(w).Encode(tr)
		case "/apis/authorization.k8s.io/v1/subjectaccessreviews":
			var sar authzv1.SubjectAccessReview
			json.NewDecoder(r.Body).Decode(&sar)
			ra := sar.Spec.ResourceAttributes
			sar.Status.Allowed = (sar.Spec.User == "alice" || sar.Spec.User == readerSA) && ra != nil && *ra == ReadAccess()
			json.NewEncoder(w).Encode(sar)
		default:
			http.NotFound(w, r)
		}
	}))
}

func TestKubeReview(t *testing.T) {
	var calls atomic.Int32
	var fail atomic.Bool
	srv := kubeDouble(t, &calls, &fail)
	defer srv.Close()
	k := &KubeReview{Server: srv.URL, Client: srv.Client(), Token: "agent-sa-token", CacheTTL: time.Minute}

	if user, err := k.Authenticate(reqWith("alice-token")); err != nil || user != "alice" {
		t.Errorf("alice: %q %v", user, err)
	}
	if _, err := k.Authenticate(reqWith("bob-token")); !errors.Is(err, ErrForbidden) {
		t.Errorf("bob: %v, want forbidden", err)
	}
	if _, err := k.Authenticate(reqWith("mallory-token")); !errors.Is(err, ErrUnauthenticated) {
		t.Errorf("mallory: %v, want unauthenticated", err)
	}
	if _, err := k.Authenticate(reqWith("")); !errors.Is(err, ErrUnauthenticated) {
		t.Errorf("no token: %v", err)
	}
	before := calls.Load()
	k.Authenticate(reqWith("alice-token"))
	if calls.Load() != before {
		t.Error("a cached decision called kube-apiserver again")
	}
	fail.Store(true)
	if _, err := k.Authenticate(reqWith("carol-token")); err == nil || errors.Is(err, ErrUnauthenticated) {
		t.Errorf("apiserver failure: %v, want a transport error", err)
	}
	fail.Store(false)
	if _, err := k.Authenticate(reqWith("carol-token")); !errors.Is(err, ErrUnauthenticated) {
		t.Errorf("failure was cached: %v", err)
	}
}

func TestIsLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:8080": true, "[::1]:8080": true, "localhost:80": true, "127.5.5.5:1": true,
		":8080": false, "0.0.0.0:8080": false, "10.0.0.1:80": false, "[::]:80": false, "bogus": false,
	} {
		if got := IsLoopback(addr); got != want {
			t.Errorf("IsLoopback(%q) = %v, want %v", addr, got, want)
		}
	}
}

// openTokens is the agent's token policy, looking at the file on every
// request so a rotation is seen at once.
func openTokens(path string) (*TokenFile, error) {
	f, err := authn.Open(path, authn.Config{MinLength: authn.DefaultMinLength, CheckMode: true}, zerolog.Nop())
	if err != nil {
		return nil, err
	}
	return NewTokenAuth(f), nil
}

// TestTokenPolicy: the API's token file refuses short tokens and files
// others may write, with errors that never name the token.
func TestTokenPolicy(t *testing.T) {
	dir := t.TempDir()
	short := filepath.Join(dir, "short")
	os.WriteFile(short, []byte("tok\n"), 0o600)
	if _, err := openTokens(short); !errors.Is(err, authn.ErrTokenTooShort) || strings.Contains(err.Error(), "tok\n") {
		t.Errorf("short token: %v", err)
	}
	open := filepath.Join(dir, "open")
	os.WriteFile(open, []byte("long-enough-token-0001\n"), 0o600)
	os.Chmod(open, 0o666)
	if _, err := openTokens(open); !errors.Is(err, authn.ErrUnsafeMode) {
		t.Errorf("world-writable file: %v", err)
	}
	os.Chmod(open, 0o600)
	if _, err := openTokens(open); err != nil {
		t.Errorf("control, a safe file: %v", err)
	}
}
