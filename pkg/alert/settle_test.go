package alert

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/execid/correlator/pkg/vocab"
)

// TestWaitsForAttribution: a rule waits when its scope, a match key (under
// anyOf and not too) or a message field reads the session, the
// attribution, a claim or a flag that is not the kernel's; one that reads
// only what the process is judges at once. Every shipped rule waits.
func TestWaitsForAttribution(t *testing.T) {
	for _, r := range DefaultRules() {
		if !r.WaitsForAttribution() {
			t.Errorf("shipped rule %s does not wait for attribution", r.Name)
		}
	}
	for _, tc := range []struct {
		rule  string
		waits bool
	}{
		{`{name: r, severity: low, message: "$(argv) in $(namespace)/$(pod)", match: {argv: "nc *"}}`, false},
		{`{name: r, severity: low, message: "$(filename) $(label.app)", match: {filename: /bin/nc, labels: {app: web}}}`, false},
		{`{name: r, severity: low, message: "$(processID) $(containerID) $(matched)", match: {namespace: kube-system, container: app}}`, false},
		{`{name: r, severity: low, message: "$(pid)", match: {flags: {anyOf: [env_mismatch, scan_truncated]}}}`, false},
		{`{name: r, severity: low, scope: process, message: "$(pid)", match: {argv: "*", not: {pod: web-0}}}`, false},
		// The session's command, the user, a join flag, a claim.
		{`{name: r, severity: low, message: "$(pid)", match: {command: "nc *"}}`, true},
		{`{name: r, severity: low, message: "$(pid)", match: {user: "*"}}`, true},
		{`{name: r, severity: low, message: "$(pid)", match: {flags: {anyOf: [env_mismatch, no_audit_record]}}}`, true},
		{`{name: r, severity: low, message: "$(pid)", match: {argv: "*", not: {claimant: true}}}`, true},
		{`{name: r, severity: low, message: "$(pid)", match: {argv: "*", anyOf: [{pod: x}, {subresource: exec}]}}`, true},
		// The message names the user, or the claim.
		{`{name: r, severity: low, message: "$(user) ran $(argv)", match: {argv: "nc *"}}`, true},
		{`{name: r, severity: low, message: "$(claimedAuditID)", match: {filename: "*"}}`, true},
		// A session rule needs a session.
		{`{name: r, severity: low, scope: session, message: "$(pod)", match: {namespace: kube-system}}`, true},
	} {
		rules, err := ParseRules([]byte("rules: [" + tc.rule + "]"))
		if err != nil || len(rules) != 1 {
			t.Fatalf("%s: %v", tc.rule, err)
		}
		if got := rules[0].WaitsForAttribution(); got != tc.waits {
			t.Errorf("%s: waits %v, want %v", tc.rule, got, tc.waits)
		}
	}
}

// TestEvaluateUnsettled: on a process whose attribution has not settled,
// the rules that read it raise nothing, count nothing and are not
// remembered, but say that they match; those that do not raise at once,
// under the same ID they have once the process is attributed.
func TestEvaluateUnsettled(t *testing.T) {
	rules, err := ParseRules([]byte(`rules:
  - {name: cat-proc, severity: low, scope: process, message: "$(argv) in $(namespace)/$(pod)", match: {argv: "cat /proc/*"}}
`))
	if err != nil {
		t.Fatal(err)
	}
	e := newTestEngine(t, append(DefaultRules(), rules...), nil)
	// kubectl debug's cat before its record: no session, no claim, the
	// kernel's root_unverified.
	p := process()
	p.Argv, p.Filename = []string{"cat", "/proc/uptime"}, "/bin/cat"
	p.AuditID, p.Attribution, p.Flags = "", vocab.AttributionNone, []string{vocab.FlagRootUnverified}
	alerts, wait := e.EvaluateUnsettled(Input{Process: p}, t0)
	if !wait {
		t.Error("tamper-root-unverified matches the unsettled process, yet it need not wait")
	}
	if got := ruleNames(alerts); !slices.Equal(got, []string{"cat-proc"}) {
		t.Fatalf("unsettled: raised %v, want only the rule that does not read attribution", got)
	}
	if v := testutil.ToFloat64(e.m.matches.WithLabelValues("tamper-root-unverified")); v != 0 {
		t.Errorf("a held rule was counted as a match: %v", v)
	}
	// Settled: attributed to the debug session, which the rule exempts.
	s := session()
	s.Subresource = "ephemeralcontainers"
	a := *p
	a.AuditID, a.Attribution = s.AuditID, vocab.AttributionInherited
	settled := e.Evaluate(Input{Session: s, Process: &a, Settled: NewSettled(SettledAttributed, 1500*time.Millisecond)}, t0)
	if len(settled) != 0 {
		t.Errorf("settled: raised %v, want none (an exempt debug session; cat-proc already raised)", ruleNames(settled))
	}
	// The same process, alone and not yet seen, would give cat-proc the
	// same ID whether or not it has a session.
	fresh := newTestEngine(t, append(DefaultRules(), rules...), nil)
	again := fresh.Evaluate(Input{Session: s, Process: &a}, t0)
	if len(again) != 1 || again[0].ID != alerts[0].ID {
		t.Errorf("cat-proc after attribution: %v, want one alert with ID %s", again, alerts[0].ID)
	}
	if strings.Contains(string(alerts[0].Payload), `"settled"`) {
		t.Errorf("a rule that did not wait says it did: %s", alerts[0].Payload)
	}
}

// TestSettledInAlert: an alert of a rule that waited carries how long and
// what settled it, in its payload and in the $(waited) and $(settledBy)
// fields; tamper-root-unverified's message says it.
func TestSettledInAlert(t *testing.T) {
	p := process()
	p.AuditID, p.Attribution, p.ClaimedAuditID = "", vocab.AttributionNone, "0d8e6c1e-5b5c-4c55-9d7c-6a1f1f6e2f10"
	p.Flags = []string{vocab.FlagNoAuditRecord, vocab.FlagRootUnverified}
	in := Input{Process: p, Settled: NewSettled(vocab.FlagNoAuditRecord, 5*time.Minute)}
	alerts := newTestEngine(t, DefaultRules(), nil).Evaluate(in, t0)
	if got := ruleNames(alerts); !slices.Equal(got, []string{"tamper-root-unverified", "no-audit-record"}) {
		t.Fatalf("raised %v", got)
	}
	want := "(session: ; unattributed claim: 0d8e6c1e-5b5c-4c55-9d7c-6a1f1f6e2f10; settled after 5m0s: no_audit_record)"
	if !strings.HasSuffix(alerts[0].Message, want) {
		t.Errorf("message %q, want it to end %q", alerts[0].Message, want)
	}
	for _, a := range alerts {
		var pl struct{ Settled *Settled }
		if err := json.Unmarshal(a.Payload, &pl); err != nil {
			t.Fatal(err)
		}
		if pl.Settled == nil || *pl.Settled != (Settled{By: "no_audit_record", AfterSeconds: 300}) {
			t.Errorf("%s: payload settled %+v, want by no_audit_record after 300s", a.Rule, pl.Settled)
		}
	}
	if s := NewSettled(SettledOverCap, 1234567*time.Microsecond); !s.Early || s.AfterSeconds != 1.235 || s.waited() != "1.235s" {
		t.Errorf("over cap: %+v, waited %s", s, s.waited())
	}
}
