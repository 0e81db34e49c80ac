package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/execid/correlator/internal/testutil"
	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/store"
	"github.com/execid/correlator/pkg/vocab"
)

// TestEndToEndReusedAuditID: mallory sends alice's audit ID as her own
// Audit-ID header with a genuine exec, so the runtime hands alice's ID to
// mallory's verified root (one request, one root). Through `correlator run`
// and the REST API, in a real runc container: until mallory's record
// arrives (late, as a batching webhook delivers it), her processes are
// claimants of alice's session flagged audit_id_reused, never alice's; once
// it arrives they are mallory's own session, both flagged. alice's own
// processes are the positive control throughout.
func TestEndToEndReusedAuditID(t *testing.T) {
	m := marker()
	a := startE2E(t, "--clock-skew", "0s")
	alice := a.request("alice", "sh")
	alice.Duration = 10 * time.Minute
	a.writeLog(alice)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	var running []chan struct{}
	t.Cleanup(func() {
		cancel()
		for _, d := range running {
			<-d
		}
	})
	session := func(id, script, name string) {
		d := make(chan struct{})
		running = append(running, d)
		go func() {
			defer close(d)
			_, _ = a.ctr.Exec(ctx, []string{"sh", "-c", script, name}, auditKey+"="+id)
		}()
	}
	session(alice.AuditID, "/bin/echo "+m+"-alice-cmd; /bin/sleep 86400; true", m+"-alice")
	aliceProcs := a.waitFor(m+"-alice", 0, func(ps []join.Process) error {
		if byArgv(ps, "/bin/echo", m+"-alice-cmd") == nil {
			return fmt.Errorf("alice's command not stored yet")
		}
		return attributed(ps, alice.AuditID, vocab.AttributionAuditID, vocab.AttributionInherited)
	})
	aliceRoot := byArgv(aliceProcs, "sh", "-c")
	if aliceRoot == nil {
		t.Fatalf("alice's root not found:\n%s", dumpProcs(aliceProcs))
	}

	// mallory's request comes after alice's root started, as a reuse of an
	// ID read from the pod does. The agent runs with no clock skew (one
	// clock here), so the order needs no wait.
	mallory := a.request("mallory", "sh", "-c", "id")
	if !mallory.Received.After(aliceRoot.Start) {
		t.Fatalf("mallory's request at %v is not after alice's root at %v", mallory.Received, aliceRoot.Start)
	}
	mallory.AuditID, mallory.Duration = alice.AuditID, 10*time.Minute
	session(alice.AuditID, "/bin/echo "+m+"-mallory-cmd; /bin/sleep 86400; true", m+"-mallory")

	// Before mallory's record: her processes claim alice's session,
	// flagged, and are never alice's.
	malloryProcs := a.waitFor(m+"-mallory", 0, func(ps []join.Process) error {
		if byArgv(ps, "/bin/echo", m+"-mallory-cmd") == nil {
			return fmt.Errorf("mallory's command not stored yet")
		}
		for _, p := range ps {
			if p.AuditID != "" || p.Attribution != "" || p.ClaimedAuditID != alice.AuditID || !slices.Contains(p.Flags, vocab.FlagAuditIDReused) {
				return fmt.Errorf("mallory's %s %q: auditID %q attribution %q claimed %q flags %v, want an audit_id_reused claim of %s",
					p.ProcessID, p.Argv, p.AuditID, p.Attribution, p.ClaimedAuditID, p.Flags, alice.AuditID)
			}
		}
		return nil
	})
	malloryRoot := byArgv(malloryProcs, "sh", "-c")
	if malloryRoot == nil {
		t.Fatalf("mallory's root not found:\n%s", dumpProcs(malloryProcs))
	}
	checkUserFilter(t, a, "alice", aliceProcs, malloryProcs)
	v, err := a.client.Session(context.Background(), alice.AuditID)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range malloryProcs {
		if slices.ContainsFunc(v.Processes, func(q join.Process) bool { return q.ProcessID == p.ProcessID }) {
			t.Errorf("mallory's %s %q listed among alice's processes", p.ProcessID, p.Argv)
		}
	}
	if !slices.ContainsFunc(v.Claimants, func(q join.Process) bool { return q.ProcessID == malloryRoot.ProcessID }) {
		t.Errorf("mallory's root %s is not among the claimants of alice's session", malloryRoot.ProcessID)
	}
	al := a.waitAlert("audit-id-reused-root", malloryRoot.ProcessID)
	for _, want := range []string{"alice", e2ePod, e2eContainer, a.ctr.ID, malloryRoot.ProcessID, alice.AuditID} {
		if !strings.Contains(al.Message, want) {
			t.Errorf("audit-id-reused-root: message %q lacks %q", al.Message, want)
		}
	}

	// mallory's record arrives: her processes are her own session, both
	// sessions flagged, alice's still hers.
	a.postWebhook(mallory)
	var key string
	malloryProcs = a.waitFor(m+"-mallory", 0, func(ps []join.Process) error {
		if len(ps) == 0 {
			return fmt.Errorf("none stored")
		}
		key = ps[0].AuditID
		if !strings.HasPrefix(key, alice.AuditID+"~") {
			return fmt.Errorf("mallory's processes attributed to %q, want a session key of their own under %s", key, alice.AuditID)
		}
		if err := attributed(ps, key, vocab.AttributionAuditID, vocab.AttributionInherited); err != nil {
			return err
		}
		return flagged(ps, vocab.FlagAuditIDConflict)
	})
	ms, err := a.client.Session(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	if ms.User.Username != "mallory" || !slices.Contains(ms.Flags, vocab.FlagAuditIDConflict) || len(ms.Conflicts) != 1 || ms.Conflicts[0].User.Username != "alice" {
		t.Errorf("mallory's session %s: user %q flags %v conflicts %d, want mallory's, flagged, listing alice's request", key, ms.User.Username, ms.Flags, len(ms.Conflicts))
	}
	aliceProcs = a.waitFor(m+"-alice", 0, func(ps []join.Process) error {
		if err := attributed(ps, alice.AuditID, vocab.AttributionAuditID, vocab.AttributionInherited); err != nil {
			return err
		}
		return flagged(ps, vocab.FlagAuditIDConflict)
	})
	checkUserFilter(t, a, "alice", aliceProcs, malloryProcs)
	checkUserFilter(t, a, "mallory", malloryProcs, aliceProcs)
	for _, s := range []string{alice.AuditID, key} {
		al := a.waitSessionAlert("audit-id-reused", s)
		for _, want := range []string{"alice", "mallory", alice.AuditID, e2ePod + "/" + e2eContainer} {
			if !strings.Contains(al.Message, want) {
				t.Errorf("audit-id-reused for %s: message %q lacks %q", s, al.Message, want)
			}
		}
	}
}

// flagged checks that every process carries flag.
func flagged(ps []join.Process, flag string) error {
	for _, p := range ps {
		if !slices.Contains(p.Flags, flag) {
			return fmt.Errorf("process %s %q: flags %v, want %s", p.ProcessID, p.Argv, p.Flags, flag)
		}
	}
	return nil
}

// checkUserFilter: ?user=user returns every process of own and none of
// other's.
func checkUserFilter(t *testing.T, a *e2eAgent, user string, own, other []join.Process) {
	t.Helper()
	page, err := a.client.Processes(context.Background(), url.Values{"user": {user}, "limit": {"1000"}})
	if err != nil {
		t.Fatal(err)
	}
	has := func(p join.Process) bool {
		return slices.ContainsFunc(page.Items, func(q join.Process) bool { return q.ProcessID == p.ProcessID })
	}
	for _, p := range other {
		if has(p) {
			t.Errorf("user=%s returns %s %q, which is not %s's", user, p.ProcessID, p.Argv, user)
		}
	}
	for _, p := range own {
		if !has(p) {
			t.Errorf("user=%s misses %s's %s %q", user, user, p.ProcessID, p.Argv)
		}
	}
}

// waitSessionAlert waits for an alert of rule about session key.
func (a *e2eAgent) waitSessionAlert(rule, key string) store.Alert {
	a.t.Helper()
	var got store.Alert
	testutil.EventuallyNil(a.t, func() error {
		resp, err := http.Get(a.base + "/api/v1/alerts?limit=500&rule=" + rule)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		var page struct {
			Items []store.Alert `json:"items"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&page); err != nil {
			return err
		}
		for _, al := range page.Items {
			if al.AuditID == key {
				got = al
				return nil
			}
		}
		return fmt.Errorf("no %s alert for session %s", rule, key)
	})
	return got
}
