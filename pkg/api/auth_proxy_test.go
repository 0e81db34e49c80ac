package api

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// TestKubeReviewThroughProxy: kube-apiserver's pod proxy drops
// Authorization, so the token comes in X-Correlator-Authorization and is
// verified the same way; a token minted for the audience "correlator" is
// accepted only when the reviewer asks for that audience.
func TestKubeReviewThroughProxy(t *testing.T) {
	var calls atomic.Int32
	var fail atomic.Bool
	srv := kubeDouble(t, &calls, &fail)
	defer srv.Close()
	review := func(aud []string) *KubeReview {
		return &KubeReview{Server: srv.URL, Client: srv.Client(), Token: "agent-sa-token",
			CacheTTL: time.Minute, Audiences: aud}
	}
	proxied := func(h, v string) *http.Request {
		r := httptest.NewRequest(http.MethodGet, "/api/v1/sessions", nil)
		r.Header.Set(h, v)
		return r
	}
	for _, tc := range []struct {
		name   string
		k      *KubeReview
		req    *http.Request
		user   string
		wantEr error
	}{
		{"proxy header", review(nil), proxied(ProxyAuthHeader, "Bearer alice-token"), "alice", nil},
		{"proxy header, forbidden user", review(nil), proxied(ProxyAuthHeader, "Bearer bob-token"), "", ErrForbidden},
		{"proxy header without Bearer", review(nil), proxied(ProxyAuthHeader, "alice-token"), "", ErrUnauthenticated},
		{"minted token, audience asked", review([]string{TokenAudience}), proxied(ProxyAuthHeader, "Bearer reader-token"), readerSA, nil},
		{"minted token, default audience only", review(nil), proxied(ProxyAuthHeader, "Bearer reader-token"), "", ErrUnauthenticated},
		{"unknown token, audience asked", review([]string{TokenAudience}), proxied(ProxyAuthHeader, "Bearer mallory"), "", ErrUnauthenticated},
	} {
		t.Run(tc.name, func(t *testing.T) {
			user, err := tc.k.Authenticate(tc.req)
			if !errors.Is(err, tc.wantEr) || (tc.wantEr == nil && user != tc.user) {
				t.Errorf("got %q %v, want %q %v", user, err, tc.user, tc.wantEr)
			}
		})
	}
	// Authorization wins when both are present: a proxied header cannot
	// replace the credential of a direct caller.
	r := proxied("Authorization", "Bearer bob-token")
	r.Header.Set(ProxyAuthHeader, "Bearer alice-token")
	if _, err := review(nil).Authenticate(r); !errors.Is(err, ErrForbidden) {
		t.Errorf("both headers: %v, want bob's answer (forbidden)", err)
	}
}

// TestTokenFileThroughProxy: the token file reads the proxy header too.
func TestTokenFileThroughProxy(t *testing.T) {
	r := httptest.NewRequest(http.MethodGet, "/api/v1/sessions", nil)
	r.Header.Set(ProxyAuthHeader, "Bearer x")
	if tok, ok := bearer(r); !ok || tok != "x" {
		t.Errorf("bearer = %q %v", tok, ok)
	}
}
