package api

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
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

// clock is a test's settable clock.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

func (c *clock) set(t time.Time) { c.mu.Lock(); defer c.mu.Unlock(); c.now = t }

// pendingFixture stores, in a real SQLite file, a session and four
// processes of its pod: a root that carried its ID and waits (a claimant),
// an ID-less root that waits, one whose stored deadline has passed, and
// one attributed. It serves them with c's clock, without authentication.
func pendingFixture(t *testing.T, c *clock, until time.Time) *httptest.Server {
	t.Helper()
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "c.db"), sqlite.Config{}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	proc := func(id string, start int) join.Process {
		return join.Process{Exec: capture.Exec{ProcessID: id, PID: uint32(start), Filename: "/bin/sh", Argv: []string{"sh"}},
			Namespace: "shop", Pod: "web-0", Container: "app", Start: t0.Add(time.Duration(start) * time.Second), Flags: []string{}}
	}
	claimant, idless, stale, done := proc("claimant", 1), proc("idless", 2), proc("stale", 3), proc("done", 4)
	claimant.ClaimedAuditID, claimant.PendingUntil = "aaaa", until
	idless.PendingUntil = until
	stale.PendingUntil = until.Add(-time.Hour)
	done.AuditID, done.Attribution, done.Source = "aaaa", vocab.AttributionInherited, vocab.SourceInherited
	b := store.Batch{
		Sessions: []join.Session{{ExecRecord: auditlog.ExecRecord{AuditID: "aaaa", User: auditlog.UserInfo{Username: "alice"},
			Namespace: "shop", Pod: "web-0", Container: "app", Command: []string{"sh"}, Verb: "create",
			Subresource: "exec", Code: 101, RequestReceivedTimestamp: t0}}},
		Processes: []join.Process{claimant, idless, stale, done},
	}
	if err := st.Write(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(NewHandler(st, Config{Now: c.Now}, zerolog.Nop()))
	t.Cleanup(srv.Close)
	return srv
}

// TestPendingServed: a process whose stored wait is to end is served
// pending, with its deadline, in the process list and among a session's
// claimants, as the OpenAPI document declares; one whose deadline has
// passed is not, and once the clock passes the deadline none is.
func TestPendingServed(t *testing.T) {
	until := t0.Add(time.Minute)
	c := &clock{now: until.Add(-time.Second)}
	srv := pendingFixture(t, c, until)
	d := loadOpenAPI(t)
	type served struct {
		Pending      bool      `json:"pending"`
		PendingUntil time.Time `json:"pendingUntil"`
	}
	fetch := func(path string) (raw map[string]any, byID map[string]served) {
		t.Helper()
		var body json.RawMessage
		if code := get(t, srv, "", path, &body); code != http.StatusOK {
			t.Fatalf("%s: %d", path, code)
		}
		json.Unmarshal(body, &raw)
		route := path
		if strings.HasPrefix(path, "/api/v1/sessions/") {
			route = "/api/v1/sessions/{auditID}"
		}
		for _, e := range d.validate(d.Paths[route]["get"].Responses["200"].Content["application/json"].Schema, raw, path) {
			t.Error(e)
		}
		var v struct {
			Items, Processes, Claimants []struct {
				ProcessID string `json:"processID"`
				served
			}
		}
		json.Unmarshal(body, &v)
		byID = map[string]served{}
		for _, l := range [][]struct {
			ProcessID string `json:"processID"`
			served
		}{v.Items, v.Processes, v.Claimants} {
			for _, p := range l {
				byID[p.ProcessID] = p.served
			}
		}
		return raw, byID
	}
	want := func(what string, got map[string]served, pending ...string) {
		t.Helper()
		for id, s := range got {
			isPending := false
			for _, p := range pending {
				isPending = isPending || p == id
			}
			switch {
			case isPending && (!s.Pending || !s.PendingUntil.Equal(until)):
				t.Errorf("%s: %s served pending %v until %v, want pending until %v", what, id, s.Pending, s.PendingUntil, until)
			case !isPending && (s.Pending || !s.PendingUntil.IsZero()):
				t.Errorf("%s: %s served pending %v until %v, want neither", what, id, s.Pending, s.PendingUntil)
			}
		}
	}

	_, list := fetch("/api/v1/processes")
	if len(list) != 4 {
		t.Fatalf("listed %d processes, want 4", len(list))
	}
	want("listed before the deadline", list, "claimant", "idless")
	_, sess := fetch("/api/v1/sessions/aaaa")
	if _, ok := sess["claimant"]; !ok {
		t.Fatal("the session does not list its claimant")
	}
	want("session before the deadline", sess, "claimant")

	c.set(until)
	raw, list := fetch("/api/v1/processes")
	want("listed at the deadline", list)
	if b, _ := json.Marshal(raw); strings.Contains(string(b), `"pending`) {
		t.Errorf("served after the deadline with a pending field: %s", b)
	}
	_, sess = fetch("/api/v1/sessions/aaaa")
	want("session at the deadline", sess)
}
