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
