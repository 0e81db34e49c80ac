package soak

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
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

// The verifier decides from one process of the session's user attributed
// to its ID, and reads the tree only when there is none: to tell a
// session stored unattributed (counted apart) from one lost or stored
// under another user. Each case's answer is the tree check's, and the
// tree is read only where the page came back empty.
func TestVerifierCheck(t *testing.T) {
	st, sess, proc := verifierStore(t)
	root := proc("1-1", "alice-1", vocab.AttributionAuditID)
	child := proc("2-1", "alice-1", vocab.AttributionInherited)
	child.ParentProcessID = root.ProcessID
	if err := st.Write(context.Background(), store.Batch{
		Sessions:  []join.Session{sess("alice-1", "alice"), sess("bob-1", "bob")},
		Processes: []join.Process{root, child, proc("3-1", "", vocab.AttributionNone)},
	}); err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	trees := 0
	h := api.NewHandler(st, api.Config{}, zerolog.Nop())
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/api/v1/sessions/") {
			mu.Lock()
			trees++
			mu.Unlock()
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	v := &verifier{client: &api.Client{BaseURL: srv.URL, HTTP: srv.Client()}}

	for _, tc := range []struct {
		name, id, user string
		stored         bool
		errHas         string // "" for attributed
		tree           bool   // the tree was read
	}{
		{"attributed", "alice-1", "alice", true, "", false},
		{"stored, nothing attributed", "bob-1", "bob", true, "no process attributed", true},
		{"stored under another user", "alice-1", "mallory", false, `stored user "alice", want "mallory"`, true},
		{"not stored", "carol-1", "carol", false, "404", true},
	} {
		mu.Lock()
		trees = 0
		mu.Unlock()
		stored, err := v.check(context.Background(), ackedReq{auditID: tc.id, user: tc.user})
		if stored != tc.stored || (err == nil) != (tc.errHas == "") || err != nil && !strings.Contains(err.Error(), tc.errHas) {
			t.Errorf("%s: stored %v, err %v; want %v, an error holding %q", tc.name, stored, err, tc.stored, tc.errHas)
		}
		mu.Lock()
		if got := trees > 0; got != tc.tree {
			t.Errorf("%s: tree read %d times, want read: %v", tc.name, trees, tc.tree)
		}
		mu.Unlock()
	}
}

// A request waiting for its attribution is looked up again only once
// retry has passed since its last lookup; a newly due one at once. The
// verifier's ticks are short (between the responders' queries), so a
// retry on every tick would multiply its load on the agent.
func TestVerifierRetriesEvery(t *testing.T) {
	st, sess, proc := verifierStore(t)
	if err := st.Write(context.Background(), store.Batch{
		Sessions:  []join.Session{sess("alice-1", "alice"), sess("bob-1", "bob")},
		Processes: []join.Process{proc("1-1", "alice-1", vocab.AttributionAuditID)},
	}); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	asked := map[string]int{} // by audit ID
	h := api.NewHandler(st, api.Config{}, zerolog.Nop())
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.URL.Query().Get("auditID")
		if id == "" {
			id = strings.TrimPrefix(r.URL.Path, "/api/v1/sessions/")
		}
		mu.Lock()
		asked[id]++
		mu.Unlock()
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	l := &load{}
	v := &verifier{client: &api.Client{BaseURL: srv.URL, HTTP: srv.Client()}, load: l, giveUp: time.Hour}
	due := func(ids ...string) {
		l.mu.Lock()
		for _, id := range ids {
			l.toCheck = append(l.toCheck, ackedReq{auditID: id, user: strings.TrimSuffix(id, "-1"), at: time.Now().Add(-time.Minute)})
		}
		l.mu.Unlock()
	}
	counts := func(step string, want map[string]int, verified, lost, unattributed int64) {
		t.Helper()
		mu.Lock()
		defer mu.Unlock()
		for id, n := range want {
			if asked[id] != n {
				t.Errorf("%s: %s asked %d times, want %d", step, id, asked[id], n)
			}
		}
		if g := [3]int64{v.verified.Load(), v.lost.Load(), v.unattributed.Load()}; g != [3]int64{verified, lost, unattributed} {
			t.Errorf("%s: verified, lost, unattributed %v, want %v", step, g, [3]int64{verified, lost, unattributed})
		}
	}
	ctx := context.Background()

	due("alice-1", "bob-1")
	v.once(ctx, 0, time.Hour)
	counts("first", map[string]int{"alice-1": 1, "bob-1": 2}, 1, 0, 0) // bob's page came back empty: his tree too
	due("carol-1")
	v.once(ctx, 0, time.Hour)
	counts("within retry", map[string]int{"bob-1": 2, "carol-1": 2}, 1, 0, 0)
	if v.waiting() != 2 {
		t.Errorf("waiting %d, want 2 (bob, carol)", v.waiting())
	}
	v.once(ctx, 0, 0)
	counts("retry passed", map[string]int{"alice-1": 1, "bob-1": 4, "carol-1": 4}, 1, 0, 0)
	v.giveUp = 0
	v.once(ctx, 0, 0)
	counts("given up", map[string]int{"bob-1": 6, "carol-1": 6}, 2, 1, 1)
	if v.waiting() != 0 || len(v.lostIDs) != 1 || !strings.HasPrefix(v.lostIDs[0], "carol-1") {
		t.Errorf("waiting %d, lost %q; want 0 and carol's", v.waiting(), v.lostIDs)
	}
}

// verifierStore is a store with helpers making a session of the pod
// runner-0 and a process in it, both started a minute ago.
func verifierStore(t *testing.T) (*sqlite.Store, func(id, user string) join.Session, func(id, auditID string, a vocab.Attribution) join.Process) {
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "v.db"), sqlite.Config{}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	t0 := time.Now().Add(-time.Minute).UTC()
	sess := func(id, user string) join.Session {
		return join.Session{ExecRecord: auditlog.ExecRecord{AuditID: id, User: auditlog.UserInfo{Username: user},
			Namespace: "ci", Pod: "runner-0", Container: "c", Verb: "create", Subresource: "exec", Code: 101,
			RequestReceivedTimestamp: t0}, UpdatedAt: t0}
	}
	proc := func(id, auditID string, a vocab.Attribution) join.Process {
		return join.Process{Exec: capture.Exec{ProcessID: id, PID: 7, Filename: "/bin/true", Argv: []string{"/bin/true"}},
			Namespace: "ci", Pod: "runner-0", Container: "c", Start: t0, ExecTime: t0, AuditID: auditID, Attribution: a,
			Flags: []string{}}
	}
	return st, sess, proc
}
