package api

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/execid/correlator/pkg/auditlog"
	"github.com/execid/correlator/pkg/capture"
	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/store"
	"github.com/execid/correlator/pkg/store/sqlite"
	"github.com/execid/correlator/pkg/vocab"
)

var t0 = time.Date(2026, 3, 4, 10, 0, 0, 0, time.UTC)

// fixture stores two users' overlapping sessions in one pod, in a real
// SQLite file, and serves the API on a loopback socket.
func fixture(t *testing.T) (*httptest.Server, string) {
	t.Helper()
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "c.db"), sqlite.Config{}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	end, zero := t0.Add(5*time.Minute), 0
	b := store.Batch{
		Sessions: []join.Session{
			{ExecRecord: auditlog.ExecRecord{AuditID: "aaaa", User: auditlog.UserInfo{Username: "alice", Groups: []string{"sre"}},
				Namespace: "shop", Pod: "web-0", Container: "app", Command: []string{"sh"}, Verb: "get", Subresource: "exec",
				Stages: []string{auditlog.StageRequestReceived, auditlog.StageResponseComplete}, Code: 101, Decision: "allow",
				RequestURI: "/api/v1/namespaces/shop/pods/web-0/exec?command=sh&container=app", RequestReceivedTimestamp: t0,
				EndTimestamp: end, Annotations: map[string]string{auditlog.AnnotationDecision: "allow"}},
				Conflicts: []auditlog.ExecRecord{{AuditID: "aaaa", User: auditlog.UserInfo{Username: "mallory"}, Namespace: "shop",
					Pod: "web-0", Verb: "create", Subresource: "exec", Stages: []string{auditlog.StageRequestReceived},
					Flags: []string{vocab.FlagAuditIDConflict}}}},
			{ExecRecord: auditlog.ExecRecord{AuditID: "bbbb", User: auditlog.UserInfo{Username: "bob", Groups: []string{"dev"}},
				ImpersonatedUser: &auditlog.UserInfo{Username: "deployer"}, Namespace: "shop", Pod: "web-0", Container: "app",
				Command: []string{"bash", "-c", "curl evil"}, Verb: "create", Subresource: "exec", Stages: []string{}, Code: 101,
				RequestReceivedTimestamp: t0.Add(time.Minute)}, SPOExecRequestUID: "spo-1"},
		},
		Processes: []join.Process{
			{Exec: capture.Exec{ProcessID: "10-1", PID: 10, Filename: "/bin/sh", Argv: []string{"sh"}}, Namespace: "shop",
				Pod: "web-0", Container: "app", Start: t0.Add(time.Second), ExecTime: t0.Add(time.Second), AuditID: "aaaa",
				Attribution: vocab.AttributionAuditID, Source: vocab.SourceEnv},
			{Exec: capture.Exec{ProcessID: "11-2", ParentProcessID: "10-1", PID: 11, Filename: "/bin/ls", Argv: []string{"ls", "/"}},
				Namespace: "shop", Pod: "web-0", Container: "app", Start: t0.Add(2 * time.Second), AuditID: "aaaa",
				Attribution: vocab.AttributionInherited, Source: vocab.SourceInherited, Exit: t0.Add(3 * time.Second), ExitCode: &zero},
			{Exec: capture.Exec{ProcessID: "12-3", ParentProcessID: "11-2", PID: 12, Filename: "/bin/cat",
				Argv: []string{"cat", "/etc/shadow"}, ArgvTruncated: true}, Namespace: "shop", Pod: "web-0", Container: "app",
				Start: t0.Add(3 * time.Second), AuditID: "aaaa", Attribution: vocab.AttributionInherited,
				Source: vocab.SourceInherited, Flags: []string{vocab.FlagEnvRemoved, vocab.FlagArgvTruncated}},
			{Exec: capture.Exec{ProcessID: "20-4", PID: 20, Filename: "/bin/bash", Argv: []string{"bash", "-c", "curl evil"}},
				Namespace: "shop", Pod: "web-0", Container: "app", Start: t0.Add(61 * time.Second), AuditID: "bbbb",
				Attribution: vocab.AttributionAuditID, Source: vocab.SourceEnv, SPOExecRequestUID: "spo-1"},
			{Exec: capture.Exec{ProcessID: "30-5", PID: 30, Filename: "/bin/sh", Argv: []string{"sh"}}, Namespace: "shop",
				Pod: "web-0", Container: "app", Start: t0.Add(62 * time.Second), ClaimedAuditID: "aaaa",
				Flags: []string{vocab.FlagRootUnverified}},
		},
		Alerts: []store.Alert{
			{ID: "al1", Time: t0.Add(3 * time.Second), Rule: "sensitive-read", Severity: "high", Message: "cat /etc/shadow",
				AuditID: "aaaa", ProcessID: "12-3"},
			{ID: "al2", Time: t0.Add(61 * time.Second), Rule: "shell", Severity: "medium", Message: "bash -c curl evil",
				AuditID: "bbbb", ProcessID: "20-4"},
		},
	}
	if err := st.Write(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	tokens := filepath.Join(t.TempDir(), "tokens")
	os.WriteFile(tokens, []byte("responder-token-0001\n"), 0o600)
	tf, err := openTokens(tokens)
	if err != nil {
		t.Fatal(err)
	}
	h := NewHandler(st, Config{Auth: tf, Now: func() time.Time { return t0.Add(time.Hour) },
		Ready: func() error { return nil }}, zerolog.Nop())
	srv := httptest.NewServer(h) // a real socket on 127.0.0.1
	t.Cleanup(srv.Close)
	return srv, "responder-token-0001"
}

func get(t *testing.T, srv *httptest.Server, token, path string, out any) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if out != nil && resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(body, out); err != nil {
			t.Fatalf("decoding %s: %v: %s", path, err, body)
		}
	}
	return resp.StatusCode
}

func TestAuthRequired(t *testing.T) {
	srv, tok := fixture(t)
	for _, p := range []string{"/api/v1/sessions", "/api/v1/sessions/aaaa", "/api/v1/processes", "/api/v1/alerts"} {
		if code := get(t, srv, "", p, nil); code != http.StatusUnauthorized {
			t.Errorf("%s without a token: %d, want 401", p, code)
		}
		if code := get(t, srv, "wrong", p, nil); code != http.StatusUnauthorized {
			t.Errorf("%s with a wrong token: %d, want 401", p, code)
		}
		if code := get(t, srv, tok, p, nil); code != http.StatusOK {
			t.Errorf("%s with the token: %d, want 200", p, code)
		}
	}
	for _, p := range []string{"/healthz", "/readyz", "/api/v1/openapi.json"} {
		if code := get(t, srv, "", p, nil); code != http.StatusOK {
			t.Errorf("%s: %d, want 200 without a token", p, code)
		}
	}
}

func TestSessionsAndProcesses(t *testing.T) {
	srv, tok := fixture(t)
	type sessions = Page[join.Session]
	cases := []struct {
		query string
		want  string
	}{
		{"", "bbbb,aaaa"},
		{"?user=alice", "aaaa"},
		{"?user=deployer", "bbbb"},
		{"?group=dev", "bbbb"},
		{"?command=curl", "bbbb"},
		{"?namespace=shop&pod=web-0&container=app", "bbbb,aaaa"},
		{"?pod=other", ""},
		{"?since=" + url.QueryEscape(t0.Add(30*time.Second).Format(time.RFC3339)), "bbbb"},
		{"?until=" + url.QueryEscape(t0.Add(30*time.Second).Format(time.RFC3339)), "aaaa"},
		{"?since=2h", "bbbb,aaaa"},
	}
	for _, tc := range cases {
		var got sessions
		if code := get(t, srv, tok, "/api/v1/sessions"+tc.query, &got); code != 200 {
			t.Errorf("%s: %d", tc.query, code)
			continue
		}
		var ids []string
		for _, s := range got.Items {
			ids = append(ids, s.AuditID)
		}
		if strings.Join(ids, ",") != tc.want {
			t.Errorf("sessions%s = %v, want %s", tc.query, ids, tc.want)
		}
	}
	var procs Page[join.Process]
	get(t, srv, tok, "/api/v1/processes?auditID=aaaa&attribution=inherited", &procs)
	if len(procs.Items) != 2 {
		t.Errorf("inherited processes of aaaa: %d, want 2", len(procs.Items))
	}
	for _, bad := range []string{"?since=yesterday", "?limit=0", "?limit=x", "?bogus=1", "?attribution=psychic",
		"?since=1h&until=2h"} {
		if code := get(t, srv, tok, "/api/v1/processes"+bad, nil); code != http.StatusBadRequest {
			t.Errorf("processes%s: %d, want 400", bad, code)
		}
	}
}

func TestSessionTree(t *testing.T) {
	srv, tok := fixture(t)
	var v SessionView
	if code := get(t, srv, tok, "/api/v1/sessions/aaaa", &v); code != 200 {
		t.Fatalf("session: %d", code)
	}
	if v.User.Username != "alice" || len(v.Processes) != 3 || len(v.Tree) != 1 {
		t.Fatalf("session %+v", v)
	}
	if len(v.Conflicts) != 1 || v.Conflicts[0].User.Username != "mallory" || len(v.Claimants) != 1 ||
		v.Claimants[0].ProcessID != "30-5" {
		t.Errorf("conflicts %+v, claimants %+v: want mallory's request and 30-5", v.Conflicts, v.Claimants)
	}
	root := v.Tree[0]
	if root.ProcessID != "10-1" || len(root.Children) != 1 || root.Children[0].Children[0].ProcessID != "12-3" {
		t.Errorf("tree shape wrong: %+v", root)
	}
	if code := get(t, srv, tok, "/api/v1/sessions/nope", nil); code != http.StatusNotFound {
		t.Errorf("unknown session: %d, want 404", code)
	}
}

func TestPaginationThroughAPI(t *testing.T) {
	srv, tok := fixture(t)
	var seen []string
	cursor := ""
	for i := 0; i < 10; i++ {
		var p Page[join.Process]
		get(t, srv, tok, "/api/v1/processes?limit=1&cursor="+url.QueryEscape(cursor), &p)
		for _, x := range p.Items {
			seen = append(seen, x.ProcessID)
		}
		if p.NextCursor == "" {
			break
		}
		cursor = p.NextCursor
	}
	if fmt.Sprint(seen) != "[30-5 20-4 12-3 11-2 10-1]" {
		t.Errorf("paged processes %v", seen)
	}
	if code := get(t, srv, tok, "/api/v1/processes?cursor=garbage", nil); code != http.StatusBadRequest {
		t.Errorf("bad cursor: %d, want 400", code)
	}
}

// TestOpenAPICoversRoutes keeps the published contract honest.
func TestOpenAPICoversRoutes(t *testing.T) {
	var doc struct {
		OpenAPI string                    `json:"openapi"`
		Paths   map[string]map[string]any `json:"paths"`
	}
	if err := json.Unmarshal(openAPI, &doc); err != nil {
		t.Fatal(err)
	}
	for path, method := range map[string]string{
		"/api/v1/sessions": "get", "/api/v1/sessions/{auditID}": "get", "/api/v1/processes": "get",
		"/api/v1/alerts": "get", WebhookPath: "post", "/api/v1/openapi.json": "get",
		"/healthz": "get", "/readyz": "get", "/metrics": "get",
	} {
		if _, ok := doc.Paths[path][method]; !ok {
			t.Errorf("openapi.json lacks %s %s", method, path)
		}
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.") {
		t.Errorf("openapi version %q", doc.OpenAPI)
	}
}

func TestBuildTreeOrphans(t *testing.T) {
	proc := func(id, parent string) join.Process {
		return join.Process{Exec: capture.Exec{ProcessID: id, ParentProcessID: parent}}
	}
	tree := BuildTree([]join.Process{proc("a", ""), proc("b", "a"), proc("c", "gone")})
	if len(tree) != 2 || tree[0].ProcessID != "a" || tree[1].ProcessID != "c" || len(tree[0].Children) != 1 {
		t.Errorf("tree %+v", tree)
	}
}

// TestAnswersSayTheirLength: an answer leaves whole, its length said (no
// chunks, none written after the handler returns), on a real socket, for
// a page larger than net/http's buffers (which say a small one's length
// themselves); and a value that does not encode is a 500 with a JSON
// error, not a 200 cut short.
func TestAnswersSayTheirLength(t *testing.T) {
	page := make([]join.Process, 600)
	for i := range page {
		page[i] = join.Process{Namespace: "ci", Pod: fmt.Sprintf("runner-%d", i), Container: "c0", Start: time.Unix(int64(i), 0)}
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"items": page})
	}))
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || len(body) < 64<<10 {
		t.Fatalf("%d, %d bytes, %v: want 200 and a page over 64 KiB", resp.StatusCode, len(body), err)
	}
	if resp.ContentLength != int64(len(body)) || len(resp.TransferEncoding) != 0 || !json.Valid(body) {
		t.Errorf("length %d, transfer encoding %v, %d bytes of body: want the body's length said, not chunked",
			resp.ContentLength, resp.TransferEncoding, len(body))
	}
	rec := httptest.NewRecorder()
	writeJSON(rec, http.StatusOK, map[string]any{"bad": func() {}})
	var e map[string]string
	if rec.Code != http.StatusInternalServerError || json.Unmarshal(rec.Body.Bytes(), &e) != nil || e["error"] == "" {
		t.Errorf("an answer that does not encode: %d %q, want a 500 with a JSON error", rec.Code, rec.Body.Bytes())
	}
}
