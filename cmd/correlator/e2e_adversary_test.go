package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/execid/correlator/internal/testutil"
	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/store"
)

// steal is the intruder's first step: any live session's audit ID, read
// from the environ of the container's processes (same uid, so readable).
const steal = `ID=$(for e in /proc/[0-9]*/environ; do /bin/tr '\0' '\n' < $e; done | ` +
	`/bin/sed -n 's/^` + auditKey + `=//p' | /bin/head -n 1); [ -n "$ID" ] || exit 7; `

// TestEndToEndAdversary: an intruder in the pod with no session of its
// own borrows alice's live session ID three ways. Through `correlator run`
// and the REST API, each forgery must be a claimant of alice's session,
// never one of her processes, and raise the borrowed-audit-id alert; alice's
// own session is the positive control.
func TestEndToEndAdversary(t *testing.T) {
	m := marker()
	// The container's main process waits for an ID on a fifo, then re-execs
	// itself with it (the main-process forgery).
	mainScript := `mkfifo /tmp/trig; read id < /tmp/trig; exec /bin/forger reexec ` + auditKey +
		`=$id /bin/sh -c '/bin/echo ` + m + `-reexec; exec /bin/sleep 86400'`
	env := newE2EEnv(t, testutil.ContainerConfig{
		Files: map[string]string{"/bin/forger": testutil.BuildForger(t)},
		Args:  []string{"/bin/sh", "-c", mainScript},
	})
	a := env.start()
	alice := a.request("alice", "sh")
	a.writeLog(alice)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = a.ctr.Exec(ctx, []string{"sh", "-c", "/bin/sleep 86400; true", m + "-alice"}, auditKey+"="+alice.AuditID)
	}()
	t.Cleanup(func() { cancel(); <-done })
	a.waitFor(m+"-alice", 0, func(ps []join.Process) error {
		if len(ps) == 0 {
			return fmt.Errorf("alice's session not stored yet")
		}
		return attributed(ps, alice.AuditID, "audit_id")
	})

	nobody := testutil.ExecRequest{}
	a.exec(nobody, "sh", "-c", steal+`exec /bin/env `+auditKey+`=$ID /bin/sh -c '/bin/echo `+m+`-inplace; true'`)
	a.exec(nobody, "sh", "-c", steal+`while [ ! -p /tmp/trig ]; do sleep 0.05; done; echo $ID > /tmp/trig`)
	a.exec(nobody, "sh", "-c", steal+`exec /bin/forger clone-parent `+auditKey+`=$ID /bin/sh -c '/bin/echo `+m+`-clone; true'`)

	// A claim on alice's ID: unattributed, flagged, claiming her session.
	claim := func(p join.Process) error {
		if p.AuditID != "" || p.Attribution != "" || p.ClaimedAuditID != alice.AuditID || !slices.Contains(p.Flags, "root_unverified") {
			return fmt.Errorf("%s %q: auditID %q attribution %q claimed %q flags %v, want an unattributed claim of %s",
				p.ProcessID, p.Argv, p.AuditID, p.Attribution, p.ClaimedAuditID, p.Flags, alice.AuditID)
		}
		return nil
	}
	var forged []join.Process
	for _, kind := range []string{"inplace", "reexec", "clone"} {
		ps := a.waitFor(m+"-"+kind, 0, func(ps []join.Process) error {
			echo := byArgv(ps, "/bin/echo", m+"-"+kind)
			if echo == nil {
				return fmt.Errorf("%s forgery: echo not stored yet", kind)
			}
			return claim(*echo)
		})
		echo := byArgv(ps, "/bin/echo", m+"-"+kind)
		// The root (the main process's record shows its latest image, so
		// find it by ID, not by argv).
		root := a.process(echo.SessionRootID)
		if err := claim(root); err != nil || root.ProcessID == echo.ProcessID {
			t.Errorf("%s forgery root: %v", kind, err)
		}
		forged = append(forged, *echo, root)
	}

	v, err := a.client.Session(context.Background(), alice.AuditID)
	if err != nil {
		t.Fatal(err)
	}
	if v.User.Username != "alice" || len(v.Processes) == 0 {
		t.Fatalf("alice's session: user %q, %d processes", v.User.Username, len(v.Processes))
	}
	for _, f := range forged {
		if slices.ContainsFunc(v.Processes, func(p join.Process) bool { return p.ProcessID == f.ProcessID }) {
			t.Errorf("forged %s %q listed among alice's processes", f.ProcessID, f.Argv)
		}
		if !slices.ContainsFunc(v.Claimants, func(p join.Process) bool { return p.ProcessID == f.ProcessID }) {
			t.Errorf("forged %s %q not among the claimants of alice's session", f.ProcessID, f.Argv)
		}
	}
	// Filtering by user must never return a forger as alice's.
	page, err := a.client.Processes(context.Background(), map[string][]string{"user": {"alice"}, "limit": {"500"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range page.Items {
		if slices.ContainsFunc(forged, func(f join.Process) bool { return f.ProcessID == p.ProcessID }) {
			t.Errorf("user=alice returns the forged %s %q", p.ProcessID, p.Argv)
		}
	}

	// Every forged root raises borrowed-audit-id, naming the claimed user
	// and the real pod, container and process.
	roots := 0
	for _, f := range forged {
		if !slices.Contains(f.Flags, "root_unverified") || f.ProcessID != f.SessionRootID {
			continue
		}
		roots++
		al := a.waitAlert("borrowed-audit-id", f.ProcessID)
		for _, want := range []string{"alice", e2ePod, e2eContainer, a.ctr.ID, f.ProcessID, alice.AuditID} {
			if !strings.Contains(al.Message, want) {
				t.Errorf("alert for %s: message %q lacks %q", f.ProcessID, al.Message, want)
			}
		}
	}
	if roots < 3 {
		t.Errorf("%d forged roots among the claimants, want one per forgery (3)", roots)
	}
	// Positive control: alice's own processes raise no borrowed-audit-id.
	for _, p := range v.Processes {
		if al := a.alerts("borrowed-audit-id", p.ProcessID); len(al) > 0 {
			t.Errorf("alice's own process %s raised %q", p.ProcessID, al[0].Message)
		}
	}
}

// TestEndToEndAgentKilled: the agent dies with SIGKILL while bob's session
// runs; a new agent on the same pinned maps and store attributes bob's
// later commands to bob.
func TestEndToEndAgentKilled(t *testing.T) {
	env := newE2EEnv(t, testutil.ContainerConfig{})
	first := env.start()
	m := marker()
	bob := first.request("bob", "sh")
	first.writeLog(bob)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = first.ctr.Exec(ctx, []string{"sh", "-c", "mkfifo /tmp/go; read x < /tmp/go; /bin/echo " + m + "-after; /bin/sleep 86400; true", m + "-bob"},
			auditKey+"="+bob.AuditID)
	}()
	t.Cleanup(func() { cancel(); <-done })
	first.waitFor(m+"-bob", 0, func(ps []join.Process) error {
		if len(ps) == 0 {
			return fmt.Errorf("bob's root not stored yet")
		}
		return attributed(ps, bob.AuditID, "audit_id")
	})
	first.kill()

	second := env.start()
	second.exec(testutil.ExecRequest{}, "sh", "-c", "while [ ! -p /tmp/go ]; do sleep 0.05; done; echo go > /tmp/go")
	ps := second.waitFor(m+"-after", 0, func(ps []join.Process) error {
		if byArgv(ps, "/bin/echo", m+"-after") == nil {
			return fmt.Errorf("bob's command after the restart not stored yet")
		}
		return attributed(ps, bob.AuditID, "inherited", "audit_id")
	})
	if p := byArgv(ps, "/bin/echo", m+"-after"); slices.Contains(p.Flags, "root_unverified") {
		t.Errorf("bob's command after the restart flagged %v", p.Flags)
	}
	// Positive control that the restart is real: a new genuine session
	// started after it is verified too.
	carol := second.request("carol", "sh")
	second.writeLog(carol)
	second.exec(carol, "sh", "-c", "/bin/echo "+m+"-carol; true")
	second.waitFor(m+"-carol", 0, func(ps []join.Process) error {
		if len(ps) < 2 {
			return fmt.Errorf("%d of carol's processes stored, want 2", len(ps))
		}
		return attributed(ps, carol.AuditID, "audit_id", "inherited")
	})
	// The dashboard's capture panels read counters run must feed.
	resp, err := http.Get(second.base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if !regexp.MustCompile(`(?m)^correlator_capture_events_total\{kind="exec"\} [1-9]`).Match(body) {
		t.Errorf("/metrics counts no decoded exec event:\n%s", grepLines(string(body), "correlator_capture_events_total"))
	}
	if !strings.Contains(string(body), "correlator_capture_decode_errors_total 0") {
		t.Errorf("/metrics lacks the decode error counter:\n%s", grepLines(string(body), "decode_errors"))
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// process returns the stored process id in the e2e pod.
func (a *e2eAgent) process(id string) join.Process {
	a.t.Helper()
	page, err := a.client.Processes(context.Background(), map[string][]string{"pod": {e2ePod}, "limit": {"1000"}})
	if err != nil {
		a.t.Fatalf("listing processes: %v", err)
	}
	for _, p := range page.Items {
		if p.ProcessID == id {
			return p
		}
	}
	a.t.Fatalf("process %s not stored", id)
	return join.Process{}
}

// alerts lists the stored alerts of rule about processID.
func (a *e2eAgent) alerts(rule, processID string) []store.Alert {
	a.t.Helper()
	resp, err := http.Get(a.base + "/api/v1/alerts?limit=500&rule=" + rule)
	if err != nil {
		a.t.Fatalf("listing alerts: %v", err)
	}
	defer resp.Body.Close()
	var page struct {
		Items []store.Alert `json:"items"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&page); err != nil {
		a.t.Fatalf("decoding alerts: %v", err)
	}
	var out []store.Alert
	for _, al := range page.Items {
		if al.ProcessID == processID {
			out = append(out, al)
		}
	}
	return out
}

// waitAlert waits for an alert of rule about processID.
func (a *e2eAgent) waitAlert(rule, processID string) store.Alert {
	a.t.Helper()
	var got []store.Alert
	testutil.EventuallyNil(a.t, func() error {
		if got = a.alerts(rule, processID); len(got) > 0 {
			return nil
		}
		return fmt.Errorf("no %s alert for process %s\nagent log tail:\n%s", rule, processID, tail(a.stderr.String(), 3000))
	})
	return got[0]
}
