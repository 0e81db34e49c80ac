package main

import (
	"bytes"
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/execid/correlator/pkg/api"
	"github.com/execid/correlator/pkg/authn"
	"github.com/execid/correlator/pkg/store"
)

// TestResponderCommands runs sessions, session and processes against a
// real API server on loopback, backed by a real SQLite store.
func TestResponderCommands(t *testing.T) {
	st, err := store.Open(filepath.Join(t.TempDir(), "c.db"), store.Config{}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	t0 := time.Date(2026, 3, 4, 10, 0, 0, 0, time.UTC)
	code := 0
	err = st.Write(context.Background(), store.Batch{
		Sessions: []store.Session{{AuditID: "5e1c2a7d-0000-4000-8000-000000000001", Username: "alice", Groups: []string{"sre"},
			Namespace: "shop", Pod: "web-0", Container: "app", Command: []string{"sh"}, Code: 101, Decision: "allow", RequestReceived: t0,
			ImpersonatedUser: &store.UserInfo{Username: "system:serviceaccount:shop:deployer"}}},
		Processes: []store.Process{
			{ProcessID: "10-1", PID: 10, Argv: []string{"sh"}, Namespace: "shop", Pod: "web-0", Start: t0,
				AuditID: "5e1c2a7d-0000-4000-8000-000000000001", Attribution: "audit_id"},
			{ProcessID: "11-1", ParentProcessID: "10-1", PID: 11, Argv: []string{"cat", "/etc/shadow"}, Namespace: "shop", Pod: "web-0",
				Start: t0.Add(time.Second), AuditID: "5e1c2a7d-0000-4000-8000-000000000001", Attribution: "inherited",
				Flags: []string{"env_removed"}, ExitCode: &code},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	tokens := filepath.Join(t.TempDir(), "token")
	os.WriteFile(tokens, []byte("responder-token-0001\n"), 0o600)
	tf := openTokens(t, tokens)
	srv := httptest.NewServer(api.NewHandler(st, api.Config{Auth: tf}, zerolog.Nop()))
	defer srv.Close()

	clientToken := filepath.Join(t.TempDir(), "client-token")
	// The client parses its file like the agent: comments allowed.
	os.WriteFile(clientToken, []byte("# the responder's token\nresponder-token-0001\n"), 0o600)
	run := func(args ...string) (string, error) {
		root := newSessionsCmd()
		switch args[0] {
		case "session":
			root = newSessionCmd()
		case "processes":
			root = newProcessesCmd()
		}
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetErr(&out)
		root.SetArgs(append(args[1:], "--server", srv.URL, "--token-file", clientToken))
		err := root.ExecuteContext(context.Background())
		return out.String(), err
	}
	out, err := run("sessions", "--user", "alice")
	if err != nil || !strings.Contains(out, "system:serviceaccount:shop:deployer (as, by alice)") || !strings.Contains(out, "shop/web-0") {
		t.Errorf("sessions: %v\n%s", err, out)
	}
	out, err = run("session", "5e1c2a7d-0000-4000-8000-000000000001")
	if err != nil || !strings.Contains(out, "User:        alice") || !strings.Contains(out, "└─ 11 cat /etc/shadow (inherited) exit=0 [env_removed]") {
		t.Errorf("session:\n%s %v", out, err)
	}
	out, err = run("processes", "--attribution", "inherited", "-o", "json")
	if err != nil || !strings.Contains(out, `"processID": "11-1"`) || strings.Contains(out, `"processID": "10-1"`) {
		t.Errorf("processes -o json: %v\n%s", err, out)
	}
	if _, err := run("session", "nope"); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("unknown session: %v", err)
	}
	os.WriteFile(clientToken, []byte("wrong\n"), 0o600)
	if _, err := run("sessions"); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("wrong token: %v", err)
	}
}

func openTokens(t *testing.T, path string) *api.TokenFile {
	t.Helper()
	f, err := authn.Open(path, authn.Default(), zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	return api.NewTokenAuth(f)
}
