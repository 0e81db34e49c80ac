package auditlog

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/execid/correlator/internal/testutil"
	"github.com/execid/correlator/pkg/authn"
)

// TestWebhookServerNeedsAuth: a standalone receiver that checks neither a
// token nor a client certificate is refused unless it is loopback only.
func TestWebhookServerNeedsAuth(t *testing.T) {
	tokens := checkerFunc(func(string) bool { return false })
	tests := []struct {
		name string
		cfg  WebhookConfig
		ok   bool
	}{
		{"all interfaces, no auth", WebhookConfig{Listen: ":8443"}, false},
		{"wildcard address, no auth", WebhookConfig{Listen: "0.0.0.0:8443"}, false},
		{"pod address, no auth", WebhookConfig{Listen: "10.0.0.7:8443"}, false},
		{"no address, no auth", WebhookConfig{}, false},
		{"loopback, no auth", WebhookConfig{Listen: "127.0.0.1:8443"}, true},
		{"localhost, no auth", WebhookConfig{Listen: "localhost:8443"}, true},
		{"all interfaces, token file", WebhookConfig{Listen: ":8443", Tokens: tokens}, true},
		{"all interfaces, fixed token", WebhookConfig{Listen: ":8443", BearerToken: "0123456789abcdef"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewWebhookServer(tt.cfg, zerolog.Nop(), nil)
			if tt.ok && err != nil {
				t.Fatalf("refused: %v", err)
			}
			if !tt.ok && !errors.Is(err, authn.ErrInsecureListener) {
				t.Fatalf("err = %v, want %v", err, authn.ErrInsecureListener)
			}
		})
	}
}

type checkerFunc func(string) bool

func (f checkerFunc) Accepts(tok string) bool { return f(tok) }

// TestWebhookTokenRotation: the standalone receiver follows its token
// file: after a rotation the old token is refused and the new accepted.
func TestWebhookTokenRotation(t *testing.T) {
	const (
		oldTok = "old-apiserver-token-0001"
		newTok = "new-apiserver-token-0002"
	)
	path := filepath.Join(t.TempDir(), "webhook-token")
	if err := os.WriteFile(path, []byte("# kube-apiserver\n"+oldTok+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := authn.Default()
	cfg.Interval = 10 * time.Millisecond
	tf, err := authn.Open(path, cfg, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	ws, err := NewWebhookServer(WebhookConfig{Listen: ":0", Tokens: tf}, zerolog.Nop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	addr, _ := serveWebhook(t, ws)
	url, c := "http://"+addr+"/", &http.Client{Timeout: 10 * time.Second}
	body := eventList(stageLine("rot", StageResponseStarted))
	if code := post(t, c, url, oldTok, body); code != http.StatusOK {
		t.Fatalf("old token before rotation: %d", code)
	}
	if code := post(t, c, url, "# kube-apiserver", body); code != http.StatusUnauthorized {
		t.Fatalf("a comment line accepted as a token: %d", code)
	}
	if err := os.WriteFile(path, []byte(newTok+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the rotation refuses the old token", func() bool {
		return post(t, c, url, oldTok, body) == http.StatusUnauthorized
	})
	if code := post(t, c, url, newTok, body); code != http.StatusOK {
		t.Fatalf("new token after rotation: %d", code)
	}
}

// TestWebhookHandlerFirstToken: on the API listener only the token file's
// first token (the apiserver's) may post; the readers' tokens may not.
func TestWebhookHandlerFirstToken(t *testing.T) {
	const apiserver, reader = "apiserver-token-000001", "reader-token-0000000002"
	path := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(path, []byte(apiserver+"\n"+reader+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tf, err := authn.Open(path, authn.Default(), zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	sink := func(context.Context, []Event) error { return nil }
	srv := httptest.NewServer(NewWebhookHandler(WebhookConfig{Tokens: tf.First()}, sink, zerolog.Nop(), nil))
	defer srv.Close()
	body := eventList(stageLine("f", StageResponseStarted))
	for tok, want := range map[string]int{apiserver: 200, reader: 401, "": 401} {
		if code := post(t, srv.Client(), srv.URL, tok, body); code != want {
			t.Errorf("token %q: %d, want %d", tok, code, want)
		}
	}
}
