package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/execid/correlator/internal/testutil"
	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/vocab"
)

// e2ePendingTTL outlasts the record that comes 60 s late by
// testutil.EventuallyBound, the time the agent may take to read it however
// busy the machine; the no-record scenario waits it out to see its flag.
const e2ePendingTTL = 60*time.Second + testutil.EventuallyBound

// TestEndToEnd runs every scenario of the issue against one real agent
// (BPF in the kernel, SQLite on disk, HTTP on loopback) watching one real
// runc container. Scenarios run in parallel: they also check that
// concurrent sessions in one pod never bleed into each other.
func TestEndToEnd(t *testing.T) {
	a := startE2E(t, "--pending-ttl", e2ePendingTTL.String())
	scenarios := []struct {
		name string
		run  func(t *testing.T, a *e2eAgent)
	}{
		{"overlapping sessions", scenarioOverlapping},
		{"subshell, double fork and nohup", scenarioForks},
		{"env removal and forgery", scenarioTamper},
		{"forged root", scenarioForgedRoot},
		{"audit record 60s late", scenarioLateRecord},
		{"denied exec replayed", scenarioDeniedReplay},
		{"no audit record", scenarioNoRecord},
	}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			sub := *a
			sub.t = t
			sc.run(t, &sub)
		})
	}
}

func marker() string { return "m" + strings.ReplaceAll(testutil.RandomUUID()[:13], "-", "") }

// attributed checks that every process is attributed to id with one of
// the given attributions.
func attributed(ps []join.Process, id string, attrs ...vocab.Attribution) error {
	for _, p := range ps {
		if p.AuditID != id || !slices.Contains(attrs, p.Attribution) {
			return fmt.Errorf("process %s %q: auditID %q attribution %q, want %s %v", p.ProcessID, p.Argv, p.AuditID, p.Attribution, id, attrs)
		}
	}
	return nil
}

func scenarioOverlapping(t *testing.T, a *e2eAgent) {
	m := marker()
	alice := a.request("alice", "sh", "-c", "...")
	bob := a.request("bob", "sh", "-c", "...")
	bob.As = "system:serviceaccount:shop:deployer"
	var wg sync.WaitGroup
	for _, s := range []struct {
		req   testutil.ExecRequest
		sleep string
	}{{alice, "1"}, {bob, "0.5"}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a.exec(s.req, "sh", "-c", fmt.Sprintf("/bin/sleep %s; /bin/echo %s-%s; true", s.sleep, m, s.req.User))
		}()
	}
	wg.Wait()
	a.writeLog(alice)  // one by file
	a.postWebhook(bob) // one by webhook
	for _, req := range []testutil.ExecRequest{alice, bob} {
		ps := a.waitFor(m+"-"+req.User, 0, func(ps []join.Process) error {
			if len(ps) != 2 { // the shell and its echo
				return fmt.Errorf("%d processes, want 2", len(ps))
			}
			return attributed(ps, req.AuditID, "audit_id", "inherited")
		})
		v, err := a.client.Session(context.Background(), req.AuditID)
		if err != nil {
			t.Fatal(err)
		}
		if v.User.Username != req.User || v.ProcessCount != 3 || len(v.Tree) != 1 {
			t.Errorf("session %s: user %q, %d processes, %d roots; want %s, 3 (sh, sleep, echo), 1", req.AuditID, v.User.Username, v.ProcessCount, len(v.Tree), req.User)
		}
		if root := byArgv(ps, "sh"); root == nil || root.Attribution != "audit_id" {
			t.Errorf("session root: %+v, want sh attributed by audit_id", root)
		}
	}
	v, _ := a.client.Session(context.Background(), bob.AuditID)
	if v.ImpersonatedUser == nil || v.ImpersonatedUser.Username != bob.As {
		t.Errorf("bob's session impersonation = %+v, want %s", v.ImpersonatedUser, bob.As)
	}
}

func scenarioForks(t *testing.T, a *e2eAgent) {
	m := marker()
	req := a.request("carol", "sh")
	a.postWebhook(req) // the record first this time
	a.exec(req, "sh", "-c", fmt.Sprintf(
		"(/bin/echo %[1]s-sub; true); /bin/sh -c '/bin/sleep 0.3 %[1]s-bg & true'; /bin/sh -c \"trap '' HUP; /bin/echo %[1]s-nohup & true\"; /bin/sleep 0.5; true", m))
	ps := a.waitFor(m, 0, func(ps []join.Process) error {
		for _, want := range [][]string{{"/bin/echo", m + "-sub"}, {"/bin/sleep", "0.3"}, {"/bin/echo", m + "-nohup"}} {
			if byArgv(ps, want...) == nil {
				return fmt.Errorf("no process %q yet", want)
			}
		}
		return attributed(ps, req.AuditID, "audit_id", "inherited")
	})
	for _, p := range ps {
		if p.Argv[0] != "sh" && p.Attribution != "inherited" {
			t.Errorf("descendant %q attribution %q, want inherited", p.Argv, p.Attribution)
		}
	}
	// nohup is `trap '' HUP` and a background child (busybox-static has no
	// nohup applet). The background sleep outlived its parent shell: still
	// the session's.
	bg := byArgv(ps, "/bin/sleep", "0.3")
	if bg.ParentProcessID == "" {
		t.Errorf("background child has no parent process ID: %+v", bg)
	}
}

func scenarioTamper(t *testing.T, a *e2eAgent) {
	m := marker()
	req := a.request("dave", "sh")
	forged := testutil.RandomUUID()
	a.exec(req, "sh", "-c", fmt.Sprintf(
		"(unset %[1]s; /bin/echo %[2]s-removed; true); %[1]s=%[3]s /bin/echo %[2]s-forged; true", auditKey, m, forged))
	a.writeLog(req)
	ps := a.waitFor(m, 0, func(ps []join.Process) error {
		if byArgv(ps, "/bin/echo", m+"-removed") == nil || byArgv(ps, "/bin/echo", m+"-forged") == nil {
			return fmt.Errorf("tampered processes not stored yet")
		}
		return attributed(ps, req.AuditID, "audit_id", "inherited")
	})
	removed, forgedP := byArgv(ps, "/bin/echo", m+"-removed"), byArgv(ps, "/bin/echo", m+"-forged")
	if !slices.Contains(removed.Flags, "env_removed") {
		t.Errorf("removed: flags %v, want env_removed", removed.Flags)
	}
	if !slices.Contains(forgedP.Flags, "env_mismatch") || forgedP.ClaimedAuditID != forged {
		t.Errorf("forged: flags %v claimed %q, want env_mismatch and %s", forgedP.Flags, forgedP.ClaimedAuditID, forged)
	}
	if u := a.sessionUser(req.AuditID); u != "dave" {
		t.Errorf("tampered processes' session user = %q, want dave", u)
	}
}

func (a *e2eAgent) sessionUser(id string) string {
	v, err := a.client.Session(context.Background(), id)
	if err != nil {
		a.t.Fatal(err)
	}
	return v.User.Username
}

func scenarioForgedRoot(t *testing.T, a *e2eAgent) {
	m := marker()
	victim := a.request("erin", "sh")
	a.writeLog(victim)
	a.exec(victim, "sh", "-c", fmt.Sprintf("/bin/echo %s-victim; true", m))
	// Someone inside the container, with no exec session of their own (no
	// audit ID from the runtime), copies erin's ID into a child.
	a.exec(testutil.ExecRequest{}, "sh", "-c", fmt.Sprintf("%s=%s /bin/echo %s-forger; true", auditKey, victim.AuditID, m))
	ps := a.waitFor(m+"-forger", 0, func(ps []join.Process) error {
		if p := byArgv(ps, "/bin/echo", m+"-forger"); p == nil || !slices.Contains(p.Flags, "root_unverified") {
			return fmt.Errorf("forged root not stored with root_unverified yet")
		}
		return nil
	})
	f := byArgv(ps, "/bin/echo", m+"-forger")
	if f.AuditID != "" || f.Attribution != "" || f.ClaimedAuditID != victim.AuditID {
		t.Errorf("forged root: auditID %q attribution %q claimed %q; want unattributed, claiming %s", f.AuditID, f.Attribution, f.ClaimedAuditID, victim.AuditID)
	}
	a.waitFor(m+"-victim", 0, func(ps []join.Process) error { return attributed(ps, victim.AuditID, "audit_id", "inherited") })
	v, err := a.client.Session(context.Background(), victim.AuditID)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range v.Processes {
		if p.ProcessID == f.ProcessID {
			t.Errorf("forged root listed among erin's processes")
		}
	}
	if !slices.ContainsFunc(v.Claimants, func(p join.Process) bool { return p.ProcessID == f.ProcessID }) {
		t.Errorf("forged root not among the session's claimants: %v", v.Claimants)
	}
}

func scenarioLateRecord(t *testing.T, a *e2eAgent) {
	m := marker()
	req := a.request("frank", "sh")
	start := time.Now()
	a.exec(req, "sh", "-c", fmt.Sprintf("/bin/echo %s-late; true", m))
	// Stored first, waiting for its record.
	a.waitFor(m, 0, func(ps []join.Process) error {
		if len(ps) != 2 {
			return fmt.Errorf("%d processes, want 2", len(ps))
		}
		for _, p := range ps {
			if p.Attribution != "" || p.ClaimedAuditID != req.AuditID {
				return fmt.Errorf("before its record, %q is %q/%q", p.Argv, p.Attribution, p.ClaimedAuditID)
			}
		}
		return nil
	})
	// Deliberately late: 60 s after the exec, however long storing took (the
	// pending TTL runs from the processes, not from this wait).
	time.Sleep(time.Until(start.Add(60 * time.Second)))
	a.writeLog(req)
	a.waitFor(m, 0, func(ps []join.Process) error { return attributed(ps, req.AuditID, "audit_id", "inherited") })
	if u := a.sessionUser(req.AuditID); u != "frank" {
		t.Errorf("late session user = %q", u)
	}
}

func scenarioDeniedReplay(t *testing.T, a *e2eAgent) {
	m := marker()
	denied := a.request("mallory", "sh")
	denied.Code = 403
	a.postWebhook(denied)
	// The denied request never ran; someone replays its ID in a session.
	a.exec(denied, "sh", "-c", fmt.Sprintf("/bin/echo %s-replay; true", m))
	ps := a.waitFor(m, 0, func(ps []join.Process) error {
		p := byArgv(ps, "/bin/echo", m+"-replay")
		if p == nil || !slices.Contains(p.Flags, "denied_exec") {
			return fmt.Errorf("replayed process not flagged denied_exec yet")
		}
		return nil
	})
	for _, p := range ps {
		if p.AuditID != "" || p.ClaimedAuditID != denied.AuditID {
			t.Errorf("replay %q attributed %q/%q, want unattributed claiming %s", p.Argv, p.AuditID, p.Attribution, denied.AuditID)
		}
	}
	v, err := a.client.Session(context.Background(), denied.AuditID)
	if err != nil {
		t.Fatal(err)
	}
	if v.Code != 403 || len(v.Processes) != 0 || len(v.Claimants) == 0 {
		t.Errorf("denied session: code %d, %d processes, %d claimants; want 403, 0, >0", v.Code, len(v.Processes), len(v.Claimants))
	}
}

func scenarioNoRecord(t *testing.T, a *e2eAgent) {
	m := marker()
	req := a.request("nobody", "sh")
	a.exec(req, "sh", "-c", fmt.Sprintf("/bin/echo %s-orphan; true", m))
	a.waitFor(m, e2ePendingTTL, func(ps []join.Process) error {
		if len(ps) != 2 {
			return fmt.Errorf("%d processes, want 2", len(ps))
		}
		for _, p := range ps {
			if !slices.Contains(p.Flags, "no_audit_record") || p.AuditID != "" || p.ClaimedAuditID != req.AuditID {
				return fmt.Errorf("%q: flags %v auditID %q claimed %q", p.Argv, p.Flags, p.AuditID, p.ClaimedAuditID)
			}
		}
		return nil
	})
}
