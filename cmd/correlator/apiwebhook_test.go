package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/rs/zerolog"

	"github.com/execid/correlator/internal/testutil"
	"github.com/execid/correlator/pkg/api"
	"github.com/execid/correlator/pkg/auditlog"
)

// TestAPIWebhookBodyBound: the webhook on the API listener honours
// --audit-webhook-max-body-bytes like the standalone one.
func TestAPIWebhookBodyBound(t *testing.T) {
	req := testutil.ExecRequest{AuditID: testutil.RandomUUID(), User: "alice", Namespace: "shop", Pod: "web-0",
		Container: "app", Command: []string{"sh"}}
	body := req.EventList()
	var got int
	sink := func(_ context.Context, evs []auditlog.Event) error { got += len(evs); return nil }
	post := func(maxBody int64) int {
		o := &auditSourceOptions{maxBody: maxBody}
		w := httptest.NewRecorder()
		o.apiWebhook(nil, sink, zerolog.Nop(), nil).ServeHTTP(w,
			httptest.NewRequest(http.MethodPost, api.WebhookPath, bytes.NewReader(body)))
		return w.Code
	}
	if code := post(int64(len(body) / 2)); code != http.StatusRequestEntityTooLarge || got != 0 {
		t.Errorf("a body over the bound: HTTP %d, %d events taken; want 413 and none", code, got)
	}
	if code := post(int64(len(body))); code != http.StatusOK || got == 0 {
		t.Errorf("a body within the bound: HTTP %d, %d events taken", code, got)
	}
}
