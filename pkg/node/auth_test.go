package node

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

	"github.com/rs/zerolog"

	"github.com/execid/correlator/internal/testutil"
	"github.com/execid/correlator/pkg/api"
	"github.com/execid/correlator/pkg/auditlog"
	"github.com/execid/correlator/pkg/authn"
)

// TestValidateRefusesOpenWebhook: `run` refuses at start a standalone
// webhook without authentication off loopback.
func TestValidateRefusesOpenWebhook(t *testing.T) {
	c := &Config{Listen: "127.0.0.1:8080", Store: "sqlite:" + filepath.Join(t.TempDir(), "db"), TokenFile: "/t",
		Retention: 24 * time.Hour, NoCapture: true, Audit: auditlog.SourcesConfig{WebhookListen: ":8443"}}
	if err := c.Validate(); !errors.Is(err, authn.ErrInsecureListener) {
		t.Errorf("run validate: %v, want %v", err, authn.ErrInsecureListener)
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
	files := authn.NewFiles(zerolog.Nop())
	tf, err := files.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := files.Open(path); again != tf {
		t.Fatal("the same file opened twice is two sources")
	}
	c := &Config{TokenFile: path}
	apiAuth, err := c.authenticator(tf, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	sink := func(context.Context, []auditlog.Event) error { return nil }
	onAPI := auditlog.NewWebhookHandler(auditlog.WebhookConfig{Tokens: tf.First()}, sink, zerolog.Nop(), nil)
	aw := &auditlog.SourcesConfig{WebhookListen: "127.0.0.1:0", TokenFile: path}
	srcs, err := aw.Sources(files, zerolog.Nop(), nil)
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
	tf, err := authn.NewFiles(zerolog.Nop()).Open(path)
	if err != nil {
		t.Fatal(err)
	}
	c := &Config{TokenFile: path, AuthKubernetes: true}
	a, err := c.authenticator(tf, zerolog.Nop())
	if err != nil {
		t.Fatalf("with a token file: %v", err)
	}
	req := httptest.NewRequest(http.MethodGet, "/api/v1/sessions", nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	if _, err := a.Authenticate(req); err != nil {
		t.Errorf("the token file's token refused: %v", err)
	}
	if _, err := (&Config{AuthKubernetes: true}).authenticator(nil, zerolog.Nop()); err == nil {
		t.Error("--auth-kubernetes outside a cluster with no token file: want an error")
	}
}
