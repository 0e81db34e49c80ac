package auditlog

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/execid/correlator/internal/testutil"
	"github.com/execid/correlator/pkg/authn"
)

// TestValidateWebhook: the standalone webhook follows the API's rule, a
// listener without authentication is loopback only.
func TestValidateWebhook(t *testing.T) {
	tests := []struct {
		name string
		o    SourcesConfig
		ok   bool
	}{
		{"no webhook", SourcesConfig{}, true},
		{"all interfaces, no auth", SourcesConfig{WebhookListen: ":8443"}, false},
		{"pod address, no auth", SourcesConfig{WebhookListen: "10.1.2.3:8443"}, false},
		{"loopback, no auth", SourcesConfig{WebhookListen: "127.0.0.1:8443"}, true},
		{"token file", SourcesConfig{WebhookListen: ":8443", TokenFile: "/etc/correlator/webhook-token"}, true},
		{"client CA", SourcesConfig{WebhookListen: ":8443", ClientCA: "/etc/correlator/ca.pem"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.o.ValidateWebhook()
			if tt.ok != (err == nil) || (err != nil && !errors.Is(err, authn.ErrInsecureListener)) {
				t.Errorf("err = %v, want ok=%v", err, tt.ok)
			}
		})
	}
	m, _ := NewMetrics(prometheus.NewRegistry())
	if _, err := (&SourcesConfig{WebhookListen: ":8443"}).Sources(nil, zerolog.Nop(), m); !errors.Is(err, authn.ErrInsecureListener) {
		t.Errorf("sources: %v, want %v", err, authn.ErrInsecureListener)
	}
}

// TestAPIWebhookBodyBound: the webhook on the API listener honours
// --audit-webhook-max-body-bytes like the standalone one.
func TestAPIWebhookBodyBound(t *testing.T) {
	req := testutil.ExecRequest{AuditID: testutil.RandomUUID(), User: "alice", Namespace: "shop", Pod: "web-0",
		Container: "app", Command: []string{"sh"}}
	body := req.EventList()
	var got int
	sink := func(_ context.Context, evs []Event) error { got += len(evs); return nil }
	post := func(maxBody int64) int {
		o := &SourcesConfig{MaxBody: maxBody}
		w := httptest.NewRecorder()
		// The API serves it at api.WebhookPath, which this package cannot import.
		o.APIWebhook(nil, sink, zerolog.Nop(), nil).ServeHTTP(w,
			httptest.NewRequest(http.MethodPost, "/api/v1/audit/webhook", bytes.NewReader(body)))
		return w.Code
	}
	if code := post(int64(len(body) / 2)); code != http.StatusRequestEntityTooLarge || got != 0 {
		t.Errorf("a body over the bound: HTTP %d, %d events taken; want 413 and none", code, got)
	}
	if code := post(int64(len(body))); code != http.StatusOK || got == 0 {
		t.Errorf("a body within the bound: HTTP %d, %d events taken", code, got)
	}
}
