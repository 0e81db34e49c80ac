package main

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/execid/correlator/internal/testutil"
	"github.com/execid/correlator/pkg/api"
	"github.com/execid/correlator/pkg/auditlog"
	"github.com/execid/correlator/pkg/authn"
)

// refuse answers every request with one error.
type refuse struct{ err error }

func (r refuse) Authenticate(*http.Request) (string, error) { return "", r.err }

// TestAnyAuth: the token file and the Kubernetes review are alternatives,
// but a Kubernetes "forbidden" is final.
func TestAnyAuth(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(path, []byte("file-token-00001\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := authn.Open(path, authn.Default(), zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	tf := api.NewTokenAuth(f)
	req := func(tok string) *http.Request {
		r := httptest.NewRequest(http.MethodGet, "/api/v1/sessions", nil)
		if tok != "" {
			r.Header.Set("Authorization", "Bearer "+tok)
		}
		return r
	}
	tests := []struct {
		name string
		auth anyAuth
		tok  string
		want error // nil: accepted, unless outage
		// outage: the review's own error must surface, not "unauthenticated".
		outage bool
	}{
		{"file token, kube says unauthenticated", anyAuth{refuse{api.ErrUnauthenticated}, tf}, "file-token-00001", nil, false},
		{"no token at all", anyAuth{tf, refuse{api.ErrUnauthenticated}}, "", api.ErrUnauthenticated, false},
		{"kube forbids: final", anyAuth{refuse{api.ErrForbidden}, tf}, "file-token-00001", api.ErrForbidden, false},
		{"kube unreachable, bad token: the outage is reported", anyAuth{tf, refuse{errors.New("dial tcp: refused")}}, "nope", nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tt.auth.Authenticate(req(tt.tok))
			switch {
			case tt.outage:
				if err == nil || errors.Is(err, api.ErrUnauthenticated) {
					t.Errorf("err = %v, want the review's own error", err)
				}
			case tt.want == nil && err != nil:
				t.Errorf("err = %v, want accepted", err)
			case tt.want != nil && !errors.Is(err, tt.want):
				t.Errorf("err = %v, want %v", err, tt.want)
			}
		})
	}
}

// TestValidateWebhook: the standalone webhook follows the API's rule, a
// listener without authentication is loopback only; `run` refuses it at
// start.
func TestValidateWebhook(t *testing.T) {
	tests := []struct {
		name string
		o    auditSourceOptions
		ok   bool
	}{
		{"no webhook", auditSourceOptions{}, true},
		{"all interfaces, no auth", auditSourceOptions{webhookListen: ":8443"}, false},
		{"pod address, no auth", auditSourceOptions{webhookListen: "10.1.2.3:8443"}, false},
		{"loopback, no auth", auditSourceOptions{webhookListen: "127.0.0.1:8443"}, true},
		{"token file", auditSourceOptions{webhookListen: ":8443", tokenFile: "/etc/correlator/webhook-token"}, true},
		{"client CA", auditSourceOptions{webhookListen: ":8443", clientCA: "/etc/correlator/ca.pem"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.o.validateWebhook()
			if tt.ok != (err == nil) || (err != nil && !errors.Is(err, authn.ErrInsecureListener)) {
				t.Errorf("err = %v, want ok=%v", err, tt.ok)
			}
		})
	}
	o := &runOptions{listen: "127.0.0.1:8080", storeURL: "sqlite:" + filepath.Join(t.TempDir(), "db"), tokenFile: "/t",
		retention: 24 * time.Hour, noCapture: true, audit: auditSourceOptions{webhookListen: ":8443"}}
	if err := o.validate(); !errors.Is(err, authn.ErrInsecureListener) {
		t.Errorf("run validate: %v, want %v", err, authn.ErrInsecureListener)
	}
	m, _ := auditlog.NewMetrics(prometheus.NewRegistry())
	if _, err := (&auditSourceOptions{webhookListen: ":8443"}).sources(zerolog.Nop(), m); !errors.Is(err, authn.ErrInsecureListener) {
		t.Errorf("sources: %v, want %v", err, authn.ErrInsecureListener)
	}
}

// TestSharedTokenRotation: the API and both webhooks share one source per
// token file; after a rotation every one refuses the old token and
// accepts the new.
func TestSharedTokenRotation(t *testing.T) {
	const oldTok, newTok, reader = "old-apiserver-token-0001", "new-apiserver-token-0002", "responder-token-000003"
	path := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(path, []byte("# apiserver first\n"+oldTok+"\n"+reader+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	files := newTokenFiles(zerolog.Nop())
	tf, err := files.open(path)
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := files.open(path); again != tf {
		t.Fatal("the same file opened twice is two sources")
	}
	o := &runOptions{tokenFile: path}
	apiAuth, err := o.authenticator(tf, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	sink := func(context.Context, []auditlog.Event) error { return nil }
	onAPI := auditlog.NewWebhookHandler(auditlog.WebhookConfig{Tokens: tf.First()}, sink, zerolog.Nop(), nil)
	aw := &auditSourceOptions{webhookListen: "127.0.0.1:0", tokenFile: path, tokens: files}
	srcs, err := aw.sources(zerolog.Nop(), nil)
	if err != nil || len(srcs) != 1 {
		t.Fatalf("sources: %v", err)
	}
	webhookPost := func(h http.Handler, tok string) int {
		r := httptest.NewRequest(http.MethodPost, api.WebhookPath, strings.NewReader("{}"))
		r.Header.Set("Authorization", "Bearer "+tok)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	apiOK := func(tok string) bool {
		r := httptest.NewRequest(http.MethodGet, "/api/v1/sessions", nil)
		r.Header.Set("Authorization", "Bearer "+tok)
		_, err := apiAuth.Authenticate(r)
		return err == nil
	}
	if !apiOK(oldTok) || !apiOK(reader) || webhookPost(onAPI, oldTok) == http.StatusUnauthorized {
		t.Fatal("tokens refused before the rotation")
	}
	if webhookPost(onAPI, reader) != http.StatusUnauthorized {
		t.Error("a reader's token may post audit events")
	}
	if err := os.WriteFile(path, []byte(newTok+"\n"+reader+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the rotation refuses the old token", func() bool {
		return !apiOK(oldTok) && webhookPost(onAPI, oldTok) == http.StatusUnauthorized
	})
	if !apiOK(newTok) || webhookPost(onAPI, newTok) == http.StatusUnauthorized {
		t.Error("the new token is refused after the rotation")
	}
	// The standalone webhook uses the very same source.
	if !tf.Accepts(newTok) || tf.Accepts(oldTok) {
		t.Error("shared source not rotated")
	}
}

// TestTokenFilePolicy: the agent refuses short tokens and unsafe modes.
func TestTokenFilePolicy(t *testing.T) {
	dir := t.TempDir()
	for name, tc := range map[string]struct {
		body string
		mode os.FileMode
		want error
	}{
		"short":          {"file-token\n", 0o600, authn.ErrTokenTooShort},
		"world writable": {"0123456789abcdef\n", 0o666, authn.ErrUnsafeMode},
		"good":           {"0123456789abcdef\n", 0o600, nil},
	} {
		path := filepath.Join(dir, strings.ReplaceAll(name, " ", "-"))
		os.WriteFile(path, []byte(tc.body), tc.mode)
		os.Chmod(path, tc.mode)
		if _, err := newTokenFiles(zerolog.Nop()).open(path); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", name, err, tc.want)
		}
	}
}

// TestAuthKubernetesOutsideCluster: the chart's default --auth-kubernetes,
// run where no cluster is (no KUBERNETES_SERVICE_HOST), serves the token
// file alone; with no token file there is nothing to authenticate with.
func TestAuthKubernetesOutsideCluster(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("KUBERNETES_SERVICE_PORT", "")
	const tok = "0123456789abcdef-outside"
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte(tok+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tf, err := newTokenFiles(zerolog.Nop()).open(path)
	if err != nil {
		t.Fatal(err)
	}
	o := &runOptions{tokenFile: path, authKubernetes: true}
	a, err := o.authenticator(tf, zerolog.Nop())
	if err != nil {
		t.Fatalf("with a token file: %v", err)
	}
	req := httptest.NewRequest(http.MethodGet, "/api/v1/sessions", nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	if _, err := a.Authenticate(req); err != nil {
		t.Errorf("the token file's token refused: %v", err)
	}
	if _, err := (&runOptions{authKubernetes: true}).authenticator(nil, zerolog.Nop()); err == nil {
		t.Error("--auth-kubernetes outside a cluster with no token file: want an error")
	}
}
