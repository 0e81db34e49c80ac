package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/execid/correlator/internal/testutil"
	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/store"
	"github.com/execid/correlator/pkg/vocab"
)

// lateTTL stands in for a delivery later than --pending-ttl: the clouds'
// minutes, a backlog after an outage.
const lateTTL = 4 * time.Second

// TestEndToEndLateRecord is the scenario through `correlator run`
// (BPF in the kernel, runc, SQLite on disk, the audit log tailed): a
// session's two processes carry KUBERNETES_EXEC_AUDIT_ID, its record is
// appended to the log only once they have been flagged no_audit_record.
// Both are then attributed to lateuser, flagged late_audit_record with
// their delay, the session holds them and the user filter finds them.
// Then the same across a crash: the agent is killed after the flag, a new
// one starts on the same store, and the record comes after the restart.
// The alerts the shipped rules raised at the TTL (no-audit-record) are
// followed by their resolution, under the same IDs, in the store (the
// REST API) and in an alert sink (a file). Positive control: a session
// whose record never comes stays no_audit_record, unattributed, its
// alerts standing, before and after the restart.
func TestEndToEndLateRecord(t *testing.T) {
	env := newE2EEnv(t, testutil.ContainerConfig{})
	sink := filepath.Join(env.dir, "alerts.jsonl")
	args := []string{"--pending-ttl", lateTTL.String(), "--alert-sink", "file:" + sink}
	a := env.start(args...)

	never := a.request("nobody", "sh")
	nm := marker()
	a.exec(never, "sh", "-c", fmt.Sprintf("/bin/echo %s-never; true", nm))

	// The record after the TTL.
	m := marker()
	req := a.request("lateuser", "sh")
	a.exec(req, "sh", "-c", fmt.Sprintf("/bin/echo %s-late; true", m))
	waitFlagged(a, m, req.AuditID)
	waitAlerts(a, m, "")
	a.writeLog(req)
	checkLate(t, a, m, req.AuditID, "lateuser")
	resolved := waitAlerts(a, m, store.AlertResolved)
	waitSink(a, sink, resolved)

	// The record after a restart.
	m2 := marker()
	req2 := a.request("lateuser2", "sh")
	a.exec(req2, "sh", "-c", fmt.Sprintf("/bin/echo %s-restart; true", m2))
	waitFlagged(a, m2, req2.AuditID)
	waitAlerts(a, m2, "")
	a.kill()
	b := env.start(args...)
	b.writeLog(req2)
	checkLate(t, b, m2, req2.AuditID, "lateuser2")
	waitSink(b, sink, waitAlerts(b, m2, store.AlertResolved))
	// The control, read from the agent that restarted.
	waitFlagged(b, nm, never.AuditID)
	waitAlerts(b, nm, "")
}

// waitAlerts waits until the store holds the no-audit-record alerts of
// marker's two processes, each with the given status, and returns them.
func waitAlerts(a *e2eAgent, marker, status string) []store.Alert {
	a.t.Helper()
	var got []store.Alert
	testutil.EventuallyNil(a.t, func() error {
		ids := map[string]bool{}
		for _, p := range a.processes(marker) {
			ids[p.ProcessID] = true
		}
		resp, err := http.Get(a.base + "/api/v1/alerts?" + url.Values{"rule": {"no-audit-record"}, "limit": {"500"}}.Encode())
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		var page struct{ Items []store.Alert }
		if err := json.NewDecoder(resp.Body).Decode(&page); err != nil {
			return fmt.Errorf("decoding alerts: %w", err)
		}
		got = slices.DeleteFunc(page.Items, func(al store.Alert) bool { return !ids[al.ProcessID] })
		if len(got) != 2 {
			return fmt.Errorf("%d no-audit-record alerts for %s's processes, want 2 (the shell and its echo)", len(got), marker)
		}
		for _, al := range got {
			if al.Status != status || (status != "" && (al.Resolution == "" || al.ResolvedAt.IsZero())) {
				return fmt.Errorf("alert %s status %q resolution %q, want status %q", al.ID, al.Status, al.Resolution, status)
			}
		}
		return nil
	})
	return got
}

// waitSink waits until the alert sink's file holds a resolution under
// each of the alerts' IDs.
func waitSink(a *e2eAgent, path string, alerts []store.Alert) {
	a.t.Helper()
	testutil.EventuallyNil(a.t, func() error {
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		resolved := map[string]bool{}
		sc := bufio.NewScanner(bytes.NewReader(b))
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var al store.Alert
			if json.Unmarshal(sc.Bytes(), &al) == nil && al.Status == store.AlertResolved {
				resolved[al.ID] = true
			}
		}
		for _, al := range alerts {
			if !resolved[al.ID] {
				return fmt.Errorf("no resolution of alert %s (%s) in %s", al.ID, al.Rule, path)
			}
		}
		return nil
	})
}

// waitFlagged waits until marker's two processes (the shell and its echo)
// are stored unattributed, claiming id, flagged no_audit_record: the TTL
// has passed without a record.
func waitFlagged(a *e2eAgent, marker, id string) {
	a.t.Helper()
	a.waitFor(marker, lateTTL, func(ps []join.Process) error {
		if len(ps) != 2 {
			return fmt.Errorf("%d processes, want 2", len(ps))
		}
		for _, p := range ps {
			if p.Attribution != vocab.AttributionNone || p.ClaimedAuditID != id || !slices.Contains(p.Flags, vocab.FlagNoAuditRecord) {
				return fmt.Errorf("%q: %q claimed %q flags %v, want unattributed, claiming %s, no_audit_record",
					p.Argv, p.Attribution, p.ClaimedAuditID, p.Flags, id)
			}
		}
		return nil
	})
}

// checkLate waits until marker's processes are attributed to id, flagged
// late with a delay past the TTL, and checks the session and user filter.
func checkLate(t *testing.T, a *e2eAgent, marker, id, user string) {
	t.Helper()
	ps := a.waitFor(marker, 0, func(ps []join.Process) error {
		if len(ps) != 2 {
			return fmt.Errorf("%d processes, want 2", len(ps))
		}
		if err := attributed(ps, id, vocab.AttributionAuditID, vocab.AttributionInherited); err != nil {
			return err
		}
		for _, p := range ps {
			if !slices.Contains(p.Flags, vocab.FlagLateAuditRecord) || slices.Contains(p.Flags, vocab.FlagNoAuditRecord) {
				return fmt.Errorf("%q flags %v, want late_audit_record and no no_audit_record", p.Argv, p.Flags)
			}
		}
		return nil
	})
	for _, p := range ps {
		if p.RecordDelay < lateTTL.Seconds() {
			t.Errorf("%q recordDelaySeconds %v, want at least the TTL %v", p.Argv, p.RecordDelay, lateTTL.Seconds())
		}
	}
	v, err := a.client.Session(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if v.User.Username != user || v.ProcessCount != 2 || len(v.Tree) != 1 {
		t.Errorf("session %s: user %q, %d processes, %d roots; want %s, 2, 1", id, v.User.Username, v.ProcessCount, len(v.Tree), user)
	}
	page, err := a.client.Processes(context.Background(), url.Values{"user": {user}, "command": {marker}})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Items) != 2 {
		t.Errorf("processes?user=%s: %d, want 2\n%s", user, len(page.Items), dumpProcs(page.Items))
	}
}
