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
	"github.com/execid/correlator/pkg/auditlog"
	"github.com/execid/correlator/pkg/authn"
	"github.com/execid/correlator/pkg/capture"
	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/store"
	"github.com/execid/correlator/pkg/store/sqlite"
	"github.com/execid/correlator/pkg/vocab"
)

// TestQueryCommands runs sessions, session and processes against a
// real API server on loopback, backed by a real SQLite store.
func TestQueryCommands(t *testing.T) {
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "c.db"), sqlite.Config{}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	t0 := time.Date(2026, 3, 4, 10, 0, 0, 0, time.UTC)
	code, id := 0, "5e1c2a7d-0000-4000-8000-000000000001"
	err = st.Write(context.Background(), store.Batch{
		Sessions: []join.Session{{ExecRecord: auditlog.ExecRecord{AuditID: id,
			User: auditlog.UserInfo{Username: "alice", UID: "u-1", Groups: []string{"sre"}}, Namespace: "shop", Pod: "web-0",
			Container: "app", Command: []string{"sh"}, Code: 101, Decision: "allow", RequestReceivedTimestamp: t0,
			ImpersonatedUser: &auditlog.UserInfo{Username: "system:serviceaccount:shop:deployer"}},
			SPOExecRequestUID: "spo-7",
			Conflicts: []auditlog.ExecRecord{{AuditID: id, User: auditlog.UserInfo{Username: "mallory"}, Namespace: "shop",
				Pod: "web-0", Command: []string{"sh"}, Code: 403, RequestReceivedTimestamp: t0.Add(time.Second)}}}},
		Processes: []join.Process{
			{Exec: capture.Exec{ProcessID: "10-1", PID: 10, Argv: []string{"sh"}}, Namespace: "shop", Pod: "web-0", Start: t0,
				AuditID: id, Attribution: vocab.AttributionAuditID},
			{Exec: capture.Exec{ProcessID: "11-1", ParentProcessID: "10-1", PID: 11, Argv: []string{"cat", "/etc/shadow"}},
				Namespace: "shop", Pod: "web-0", Start: t0.Add(time.Second), AuditID: id,
				Attribution: vocab.AttributionInherited, Flags: []string{vocab.FlagEnvRemoved}, Exit: t0.Add(2 * time.Second),
				ExitCode: &code},
			{Exec: capture.Exec{ProcessID: "12-1", PID: 12, Argv: []string{"tar", "c"}, ArgvTruncated: true},
				Namespace: "shop", Pod: "web-0", ExecTime: t0.Add(3 * time.Second), ClaimedAuditID: id,
				Flags: []string{vocab.FlagRootUnverified}},
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
	out, err = run("session", id)
	for _, want := range []string{"User:        alice\n", "UID:         u-1\n", "Groups:      sre\n",
		"Acting as:   system:serviceaccount:shop:deployer (groups -)\n", "Time:        2026-03-04T10:00:00Z to still open\n",
		"SPO UID:     spo-7\n", "Same ID:     mallory at 2026-03-04T10:00:01Z from -: sh shop/web-0 (code 403)\n",
		"└─ 11 cat /etc/shadow (inherited) exit=0 [env_removed]\n", "  12 tar c … shop/web-0 [root_unverified]\n"} {
		if err != nil || !strings.Contains(out, want) {
			t.Errorf("session lacks %q: %v\n%s", want, err, out)
		}
	}
	out, err = run("session", id, "-o", "json")
	if err != nil || !strings.Contains(out, `"user": {`) || !strings.Contains(out, `"username": "mallory"`) ||
		!strings.Contains(out, `"requestReceivedTimestamp": "2026-03-04T10:00:00Z"`) || strings.Contains(out, `"endTimestamp"`) {
		t.Errorf("session -o json: %v\n%s", err, out)
	}
	out, err = run("processes", "--attribution", "inherited", "-o", "json")
	if err != nil || !strings.Contains(out, `"processID": "11-1"`) || strings.Contains(out, `"processID": "10-1"`) ||
		!strings.Contains(out, `"exit": "2026-03-04T10:00:02Z"`) {
		t.Errorf("processes -o json: %v\n%s", err, out)
	}
	out, err = run("processes", "--pod", "web-0")
	if err != nil || !strings.Contains(out, "2026-03-04T10:00:01Z  11   shop/web-0") ||
		!strings.Contains(out, "2026-03-04T10:00:03Z  12   shop/web-0     -  ") {
		t.Errorf("processes: %v\n%s", err, out)
	}
	// The node CLI takes kubectl's -o formats, through pkg/render.
	out, err = run("sessions", "-o", "yaml")
	if err != nil || !strings.Contains(out, "auditID: "+id) || !strings.Contains(out, "username: alice") {
		t.Errorf("sessions -o yaml: %v\n%s", err, out)
	}
	out, err = run("processes", "--pod", "web-0", "-o", "wide")
	if err != nil || !strings.Contains(out, "CONTAINER  SOURCE  EXIT  ARGV") {
		t.Errorf("processes -o wide: %v\n%s", err, out)
	}
	if _, err := run("sessions", "-o", "xml"); err == nil || !strings.Contains(err.Error(), "want table, wide, json or yaml") {
		t.Errorf("sessions -o xml: %v", err)
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
