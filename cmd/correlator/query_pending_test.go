package main

import (
	"bytes"
	"context"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/execid/correlator/pkg/api"
	"github.com/execid/correlator/pkg/auditlog"
	"github.com/execid/correlator/pkg/capture"
	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/store"
	"github.com/execid/correlator/pkg/store/sqlite"
	"github.com/execid/correlator/pkg/vocab"
)

// TestQueryPending runs processes and session against a real API server
// and SQLite store holding two processes still waiting (a root that
// carried the session's ID, for its record; an ID-less root, for its
// pod's exec records): each says it waits and until when, in the table,
// the tree's claimants and the JSON, and the answer ends with when to ask
// again, after the later deadline. Control: asked after the deadlines,
// nothing says pending or to ask again.
func TestQueryPending(t *testing.T) {
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "c.db"), sqlite.Config{}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	t0 := time.Date(2026, 3, 4, 10, 0, 0, 0, time.UTC)
	id := "5e1c2a7d-0000-4000-8000-000000000002"
	proc := func(pid uint32, argv string, start time.Duration) join.Process {
		return join.Process{Exec: capture.Exec{ProcessID: argv, PID: pid, Argv: []string{argv}}, Namespace: "shop",
			Pod: "web-0", Start: t0.Add(start), Flags: []string{}}
	}
	carried, idless, done := proc(20, "sh", time.Second), proc(21, "bash", 2*time.Second), proc(22, "ls", 3*time.Second)
	carried.ClaimedAuditID, carried.PendingUntil = id, t0.Add(5*time.Minute)
	idless.PendingUntil = t0.Add(62 * time.Second)
	done.AuditID, done.Attribution = id, vocab.AttributionAuditID
	if err := st.Write(context.Background(), store.Batch{
		Sessions: []join.Session{{ExecRecord: auditlog.ExecRecord{AuditID: id, User: auditlog.UserInfo{Username: "alice"},
			Namespace: "shop", Pod: "web-0", Command: []string{"sh"}, Code: 101, RequestReceivedTimestamp: t0}}},
		Processes: []join.Process{carried, idless, done},
	}); err != nil {
		t.Fatal(err)
	}
	var now atomic.Int64
	now.Store(t0.Add(time.Minute).UnixNano())
	srv := httptest.NewServer(api.NewHandler(st, api.Config{Now: func() time.Time { return time.Unix(0, now.Load()) }},
		zerolog.Nop()))
	defer srv.Close()
	run := func(args ...string) string {
		t.Helper()
		root := newProcessesCmd()
		if args[0] == "session" {
			root = newSessionCmd()
		}
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetErr(&out)
		root.SetArgs(append(args[1:], "--server", srv.URL))
		if err := root.ExecuteContext(context.Background()); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out.String())
		}
		return out.String()
	}
	hint := "(2 processes still pending: their attribution may change until 2026-03-04T10:05:00Z; ask again after then)\n"
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"processes"}, []string{"pending until 2026-03-04T10:05:00Z", "pending until 2026-03-04T10:01:02Z", hint}},
		{[]string{"processes", "-o", "wide"}, []string{"pending until 2026-03-04T10:01:02Z", hint}},
		{[]string{"processes", "-o", "json"}, []string{`"pending": true,
      "pendingUntil": "2026-03-04T10:05:00Z"`, `"pendingUntil": "2026-03-04T10:01:02Z"`}},
		{[]string{"session", id}, []string{"  20 sh shop/web-0 [-] (pending: waiting for its audit record until 2026-03-04T10:05:00Z)\n",
			"(1 process still pending: its attribution may change until 2026-03-04T10:05:00Z; ask again after then)\n"}},
	} {
		out := run(tc.args...)
		for _, w := range tc.want {
			if !strings.Contains(out, w) {
				t.Errorf("%v lacks %q:\n%s", tc.args, w, out)
			}
		}
	}

	now.Store(t0.Add(5 * time.Minute).UnixNano())
	for _, args := range [][]string{{"processes"}, {"processes", "-o", "json"}, {"session", id}} {
		if out := run(args...); strings.Contains(out, "pending") || strings.Contains(out, "ask again") {
			t.Errorf("%v after the deadlines still says pending:\n%s", args, out)
		}
	}
}
