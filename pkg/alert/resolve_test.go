package alert

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/execid/correlator/internal/recordtest"
	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/store"
	"github.com/execid/correlator/pkg/vocab"
)

// lateAttributed is p as a late audit record leaves it: attributed to
// session(), flagged late_audit_record, with the join's verdict gone.
func lateAttributed(p *join.Process) *join.Process {
	cp := *p
	cp.AuditID, cp.ClaimedAuditID, cp.Attribution = recordtest.SessionID, "", vocab.AttributionAuditID
	cp.Flags, cp.RecordDelay = []string{vocab.FlagLateAuditRecord}, 1234.5
	return &cp
}

func TestResolve(t *testing.T) {
	noRecord := recordtest.Claimant()
	noRecord.Flags = []string{vocab.FlagNoAuditRecord}
	uncovered := recordtest.Claimant()
	uncovered.ClaimedAuditID, uncovered.Flags = "", []string{vocab.FlagUncoveredExec}
	forged := recordtest.Claimant()
	forged.Flags = []string{vocab.FlagEnvMismatch}
	shell := session()
	shell.Command, shell.TTY, shell.Stdin = []string{"bash"}, yes(), yes()
	shellProc := process()
	shellProc.Argv = []string{"bash"}

	// A forged root judged with no record; the record it claims comes late
	// and names a session it is not part of: borrowed-audit-id now.
	borrowing := recordtest.Claimant()
	borrowing.Flags = []string{vocab.FlagNoAuditRecord, vocab.FlagRootUnverified}
	borrowed := *borrowing
	borrowed.Flags, borrowed.RecordDelay = []string{vocab.FlagLateAuditRecord, vocab.FlagRootUnverified}, 299

	tests := []struct {
		name     string
		before   Input
		after    Input
		rule     string
		resolved bool
		why      string // in the resolution
	}{
		{"no-audit-record then a late record", Input{Process: noRecord},
			Input{Session: session(), Process: lateAttributed(noRecord)}, "no-audit-record", true,
			"a late audit record (1234.5 s after the process started) attributed the process to session " +
				recordtest.SessionID + " of user alice@example.com; it is no longer flagged no_audit_record"},
		{"uncovered-exec then a late record", Input{Process: uncovered},
			Input{Session: session(), Process: lateAttributed(uncovered)}, "uncovered-exec", true,
			"no longer flagged uncovered_exec"},
		{"no-audit-record still flagged", Input{Process: noRecord}, Input{Process: noRecord}, "no-audit-record", false, ""},
		{"interactive-shell still true after a late record", Input{Session: shell, Process: shellProc},
			Input{Session: shell, Process: lateAttributed(shellProc)}, "interactive-shell", false, ""},
		// Still true, but its message names the session, so it is keyed
		// by session: raised anew under the session, the first resolved.
		{"tamper-env-mismatch re-keyed by a late record", Input{Process: forged},
			Input{Session: session(), Process: func() *join.Process {
				p := lateAttributed(forged)
				p.Flags = append(p.Flags, vocab.FlagEnvMismatch)
				return p
			}()}, "tamper-env-mismatch", true, "; rule tamper-env-mismatch now raises alert "},
		{"tamper-root-unverified then the claimed record", Input{Process: borrowing},
			Input{Claimed: session(), Process: &borrowed}, "tamper-root-unverified", true,
			"a late audit record (299 s after the process started) named session " + recordtest.SessionID +
				" of user alice@example.com, whose ID the process carried without being part of it; " +
				"it no longer matches rule tamper-root-unverified"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			e := newTestEngine(t, DefaultRules(), reg)
			var raised []store.Alert
			for _, a := range e.Evaluate(tt.before, t0) {
				if a.Rule == tt.rule {
					raised = append(raised, a)
				}
			}
			if len(raised) != 1 {
				t.Fatalf("raised %v, want one %s", ruleNames(raised), tt.rule)
			}
			got := e.Resolve(tt.after, raised, t0.Add(3600e9))
			if !tt.resolved {
				if len(got) != 0 {
					t.Fatalf("resolved %+v; the alert still stands", got)
				}
				return
			}
			if len(got) != 1 {
				t.Fatalf("%d resolutions, want 1", len(got))
			}
			r, a := got[0], raised[0]
			if r.ID != a.ID || r.Rule != a.Rule || r.Severity != a.Severity || r.Message != a.Message ||
				r.AuditID != a.AuditID || r.ProcessID != a.ProcessID || !r.Time.Equal(a.Time) {
				t.Errorf("resolution %+v does not carry alert %+v", r, a)
			}
			if r.Status != store.AlertResolved || !r.ResolvedAt.Equal(t0.Add(3600e9)) || !strings.Contains(r.Resolution, tt.why) {
				t.Errorf("status %q at %v: %q, want it to contain %q", r.Status, r.ResolvedAt, r.Resolution, tt.why)
			}
			var pl struct{ Process join.Process }
			if err := json.Unmarshal(r.Payload, &pl); err != nil || pl.Process.ProcessID != a.ProcessID ||
				!slices.Equal(pl.Process.Flags, tt.after.Process.Flags) {
				t.Errorf("payload %s (%v), want the process as it now is", r.Payload, err)
			}
			if v := testutil.ToFloat64(e.m.resolutions.WithLabelValues(tt.rule)); v != 1 {
				t.Errorf("resolutions metric %v, want 1", v)
			}
			// Asked again with the resolution: nothing more.
			if again := e.Resolve(tt.after, got, t0); len(again) != 0 {
				t.Errorf("a resolution was resolved again: %+v", again)
			}
		})
	}
}

// TestResolveChangedID: a rule that reads attribution keys its alert by
// session; matching under another session contradicts the first alert,
// and the rule gone does too.
func TestResolveChangedID(t *testing.T) {
	e := newTestEngine(t, DefaultRules(), nil)
	root := recordtest.Claimant()
	root.ClaimedAuditID, root.Flags = "", []string{vocab.FlagRootUnverified}
	raised := e.Evaluate(Input{Process: root}, t0)
	if len(raised) != 1 || raised[0].Rule != "tamper-root-unverified" {
		t.Fatalf("raised %v", ruleNames(raised))
	}
	other := session()
	other.AuditID = "5b5e2e4c-0000-4000-8000-000000000002"
	p := lateAttributed(root)
	p.AuditID, p.Flags = other.AuditID, append(p.Flags, vocab.FlagRootUnverified)
	got := e.Resolve(Input{Session: other, Process: p}, raised, t0)
	if len(got) != 1 || !strings.Contains(got[0].Resolution, "now raises alert") {
		t.Fatalf("resolutions %+v, want one naming the new alert", got)
	}
	gone := raised[0]
	gone.Rule = "retired-rule"
	if got := e.Resolve(Input{Process: root}, []store.Alert{gone}, t0); len(got) != 1 ||
		!strings.Contains(got[0].Resolution, "no longer loaded") {
		t.Errorf("resolutions %+v, want one saying the rule is gone", got)
	}
}

// TestResolveProcessRule: a rule that reads the process alone keeps its ID
// across attribution, so a late record does not resolve its alert.
func TestResolveProcessRule(t *testing.T) {
	rules, err := ParseRules([]byte(`rules:
  - name: curl
    severity: low
    message: "$(filename) in $(pod)"
    match: {argv: ["curl *"]}
`))
	if err != nil {
		t.Fatal(err)
	}
	e := newTestEngine(t, rules, nil)
	p := recordtest.Claimant()
	p.Argv, p.Flags = []string{"curl", "x"}, []string{vocab.FlagNoAuditRecord}
	raised := e.Evaluate(Input{Process: p}, t0)
	if len(raised) != 1 {
		t.Fatalf("raised %v", ruleNames(raised))
	}
	if got := e.Resolve(Input{Session: session(), Process: lateAttributed(p)}, raised, t0); len(got) != 0 {
		t.Errorf("resolved %+v; the process still matches under the same ID", got)
	}
}
