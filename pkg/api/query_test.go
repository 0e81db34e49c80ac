package api

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/store"
)

// getError fetches path and returns its status and the decoded error body;
// it fails the test when an error body is not writeError's JSON.
func getError(t *testing.T, srv interface{ Client() *http.Client }, method, url, token string) (int, http.Header, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode < 400 {
		return resp.StatusCode, resp.Header, ""
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("%s %s: %d with Content-Type %q, want application/json: %s", method, url, resp.StatusCode, ct, body)
	}
	var e map[string]string
	if err := json.Unmarshal(body, &e); err != nil || e["error"] == "" || len(e) != 1 {
		t.Errorf("%s %s: %d body %q is not {\"error\": ...}", method, url, resp.StatusCode, body)
	}
	return resp.StatusCode, resp.Header, e["error"]
}

// TestTimeBoundsOutOfRange: bounds the store cannot hold as int64 Unix
// nanoseconds are refused instead of wrapping around.
func TestTimeBoundsOutOfRange(t *testing.T) {
	srv, tok := fixture(t)
	bad := []string{"0001-01-01T00:00:00Z", "1600-01-01T00:00:00Z", "1677-09-21T00:12:43Z", "2262-04-11T23:47:17Z",
		"9999-12-31T23:59:59Z"}
	for _, ep := range []string{"/api/v1/sessions", "/api/v1/processes", "/api/v1/alerts"} {
		for _, param := range []string{"since", "until"} {
			for _, v := range bad {
				u := srv.URL + ep + "?" + param + "=" + url.QueryEscape(v)
				code, _, msg := getError(t, srv, http.MethodGet, u, tok)
				if code != http.StatusBadRequest || !strings.Contains(msg, "outside the supported range") {
					t.Errorf("%s?%s=%s: %d %q, want 400 naming the range", ep, param, v, code, msg)
				}
			}
		}
		for _, ok := range []string{"1678-01-01T00:00:00Z", "2262-04-11T00:00:00Z"} {
			u := srv.URL + ep + "?since=" + url.QueryEscape(ok)
			if code, _, msg := getError(t, srv, http.MethodGet, u, tok); code != http.StatusOK {
				t.Errorf("%s?since=%s: %d %q, want 200", ep, ok, code, msg)
			}
		}
	}
	// A far-future until must not turn into "before everything".
	var got Page[join.Session]
	if code := get(t, srv, tok, "/api/v1/sessions?until="+url.QueryEscape("2262-01-01T00:00:00Z"), &got); code != 200 ||
		len(got.Items) != 2 {
		t.Errorf("sessions until 2262: %d %d items, want 2", code, len(got.Items))
	}
}

func TestAlertsFilters(t *testing.T) {
	srv, tok := fixture(t)
	at := func(d time.Duration) string { return url.QueryEscape(t0.Add(d).Format(time.RFC3339)) }
	cases := []struct{ query, want string }{
		{"", "al2,al1"},
		{"?rule=shell", "al2"},
		{"?severity=high", "al1"},
		{"?auditID=aaaa", "al1"},
		{"?since=" + at(30*time.Second), "al2"},
		{"?until=" + at(30*time.Second), "al1"},
		{"?since=" + at(0) + "&until=" + at(time.Minute), "al1"},
		{"?until=30m", "al2,al1"},
		{"?until=2h", ""},
		{"?limit=1", "al2"},
	}
	for _, tc := range cases {
		var got Page[store.Alert]
		if code := get(t, srv, tok, "/api/v1/alerts"+tc.query, &got); code != 200 {
			t.Errorf("alerts%s: %d", tc.query, code)
			continue
		}
		var ids []string
		for _, a := range got.Items {
			ids = append(ids, a.ID)
		}
		if strings.Join(ids, ",") != tc.want {
			t.Errorf("alerts%s = %v, want %s", tc.query, ids, tc.want)
		}
	}
	for _, bad := range []string{"?limit=0", "?limit=x", "?limit=-3", "?bogus=1", "?user=alice", "?since=yesterday",
		"?until=tomorrow", "?since=1h&until=2h", "?cursor=garbage"} {
		if code, _, msg := getError(t, srv, http.MethodGet, srv.URL+"/api/v1/alerts"+bad, tok); code != http.StatusBadRequest {
			t.Errorf("alerts%s: %d %q, want 400", bad, code, msg)
		}
	}
}

// TestErrorsAreJSON: every error, including the mux's own, is
// {"error": "..."} with Content-Type application/json.
func TestErrorsAreJSON(t *testing.T) {
	srv, tok := fixture(t)
	cases := []struct {
		method, path string
		want         int
	}{
		{http.MethodGet, "/nope", http.StatusNotFound},
		{http.MethodGet, "/api/v1/nope", http.StatusNotFound},
		{http.MethodGet, "/api/v1/sessions/nope", http.StatusNotFound},
		{http.MethodPost, "/api/v1/sessions", http.StatusMethodNotAllowed},
		{http.MethodDelete, "/healthz", http.StatusMethodNotAllowed},
		{http.MethodPost, WebhookPath, http.StatusNotFound}, // no webhook configured
		{http.MethodGet, "/api/v1/sessions?bogus=1", http.StatusBadRequest},
	}
	for _, tc := range cases {
		code, hdr, _ := getError(t, srv, tc.method, srv.URL+tc.path, tok)
		if code != tc.want {
			t.Errorf("%s %s: %d, want %d", tc.method, tc.path, code, tc.want)
		}
		if code == http.StatusMethodNotAllowed && hdr.Get("Allow") == "" {
			t.Errorf("%s %s: 405 without an Allow header", tc.method, tc.path)
		}
	}
	if code, hdr, _ := getError(t, srv, http.MethodGet, srv.URL+"/api/v1/sessions", ""); code != 401 ||
		hdr.Get("WWW-Authenticate") == "" {
		t.Errorf("unauthenticated: %d %v", code, hdr)
	}
}

// TestJSONErrorsWrapsPlainText: http.Error from a wrapped handler (the
// webhook's) becomes JSON; successful responses pass through untouched.
func TestJSONErrorsWrapsPlainText(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /plain", func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "reading body: too large", http.StatusRequestEntityTooLarge)
	})
	mux.HandleFunc("GET /bare", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) })
	mux.HandleFunc("GET /ok", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok\n")) })
	srv := httptest.NewServer(jsonErrors(mux))
	t.Cleanup(srv.Close)
	if code, _, msg := getError(t, srv, http.MethodPost, srv.URL+"/plain", ""); code != 413 ||
		msg != "reading body: too large" {
		t.Errorf("plain error: %d %q", code, msg)
	}
	if code, _, msg := getError(t, srv, http.MethodGet, srv.URL+"/bare", ""); code != 418 || msg != "i'm a teapot" {
		t.Errorf("bare status: %d %q", code, msg)
	}
	resp, err := srv.Client().Get(srv.URL + "/ok")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if body, _ := io.ReadAll(resp.Body); string(body) != "ok\n" || strings.Contains(resp.Header.Get("Content-Type"), "json") {
		t.Errorf("success rewritten: %q %q", body, resp.Header.Get("Content-Type"))
	}
}
