package delivery

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/execid/correlator/pkg/alert"
	"github.com/execid/correlator/pkg/auditlog"
	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/store"
)

// FuzzFormatSyslog: whatever an alert holds, the message is strict RFC
// 5424 and the CEF body splits back into the same fields; so is its
// resolution, whose reason is the fuzzed message too.
func FuzzFormatSyslog(f *testing.F) {
	f.Add("r", "high", "msg", "id", "user", "ns")
	f.Add("rule with spaces", "critical", "a]b\"c\\d|e=f\ng\xff", "x", `u"]\`, "k|s")
	f.Fuzz(func(t *testing.T, rule, sev, msg, id, user, ns string) {
		s := join.Session{ExecRecord: auditlog.ExecRecord{User: auditlog.UserInfo{Username: user}, Namespace: ns}}
		p, _ := json.Marshal(alert.Input{Session: &s})
		a := store.Alert{ID: id, Time: t0, Rule: rule, Severity: sev, Message: msg, Payload: p}
		r := a
		r.Status, r.ResolvedAt, r.Resolution = store.AlertResolved, t0.Add(time.Minute), msg
		for _, a := range []store.Alert{a, r} {
			for _, format := range []string{FormatRFC5424, FormatCEF} {
				raw := formatSyslog(&a, 4, "node 1", "42", "v|1", format, 0)
				m, err := parseRFC5424(raw)
				if err != nil {
					t.Fatalf("%v\n%q", err, raw)
				}
				if m.SD[sdID]["user"] != viaJSON(user) {
					t.Fatalf("user %q became %q", user, m.SD[sdID]["user"])
				}
				if got := m.SD[sdID]["resolution"]; got != strings.ToValidUTF8(a.Resolution, "\uFFFD") {
					t.Fatalf("resolution %q became %q", a.Resolution, got)
				}
				if format == FormatCEF {
					hdr, ext, err := splitCEF(m.Msg)
					if err != nil {
						t.Fatalf("%v\n%q", err, m.Msg)
					}
					if hdr[4] != cefHeaderEscaperInverse(rule) || ext["suser"] != viaJSON(user) ||
						ext["reason"] != strings.ToValidUTF8(a.Resolution, "\uFFFD") {
						t.Fatalf("CEF %q: hdr %q ext %q", m.Msg, hdr, ext)
					}
				} else if m.Msg != strings.ToValidUTF8(headline(&a), "\uFFFD") {
					t.Fatalf("MSG %q, want %q", m.Msg, headline(&a))
				}
				if udp := formatSyslog(&a, 4, "h", "1", "v", format, 600); len(udp) > 600 && len(udp) > len(raw)-len(m.Msg) {
					t.Fatalf("truncated message is %d bytes", len(udp))
				}
			}
		}
	})
}

// cefHeaderEscaperInverse is what a CEF reader gets back for a header
// field: the text, valid UTF-8, with line breaks as spaces.
func cefHeaderEscaperInverse(s string) string {
	return strings.NewReplacer("\r", " ", "\n", " ").Replace(strings.ToValidUTF8(s, "\uFFFD"))
}

// viaJSON is s as it comes out of an alert's JSON payload.
func viaJSON(s string) string {
	b, _ := json.Marshal(s)
	var out string
	_ = json.Unmarshal(b, &out)
	return out
}

// TestClaimantSyslog: syslog and CEF take the user from the payload's
// session, so a claimant's alert names no user there.
func TestClaimantSyslog(t *testing.T) {
	in := claimantInput()
	in.Process.Flags = []string{"root_unverified"}
	alerts := newTestEngine(t).Evaluate(in, t0)
	if len(alerts) != 1 || alerts[0].Rule != "borrowed-audit-id" {
		t.Fatalf("raised %v, want borrowed-audit-id", alerts)
	}
	for _, format := range []string{FormatRFC5424, FormatCEF} {
		line := string(formatSyslog(&alerts[0], 1, "node-1", "1", "test", format, 0))
		for _, bad := range []string{` user="`, "suser=", "duser=", "cs1="} {
			if strings.Contains(line, bad) {
				t.Errorf("%s: %q names the claimed session as the process's: %s", format, bad, line)
			}
		}
		if !strings.Contains(line, "1234-1700000000000000000") {
			t.Errorf("%s: the process is not named: %s", format, line)
		}
	}
}

// TestSettledSyslog: an alert that waited for its process's attribution to
// settle says how long, and what settled it, in the SD element and in CEF
// (cfp1 waitedSeconds, flexString1 settledBy); one that did not, nothing.
func TestSettledSyslog(t *testing.T) {
	in := claimantInput()
	in.Claimed = nil // a claim on an ID no record named
	in.Process.Flags = []string{"no_audit_record", "root_unverified"}
	in.Settled = alert.NewSettled("no_audit_record", 300*time.Second+250*time.Millisecond)
	alerts := newTestEngine(t).Evaluate(in, t0)
	if len(alerts) == 0 {
		t.Fatal("no alert")
	}
	for _, format := range []string{FormatRFC5424, FormatCEF} {
		m, err := parseRFC5424(formatSyslog(&alerts[0], 1, "node-1", "1", "test", format, 0))
		if err != nil {
			t.Fatal(err)
		}
		if sd := m.SD[sdID]; sd["waited"] != "300.25" || sd["settledBy"] != "no_audit_record" {
			t.Errorf("%s: SD %v, want waited 300.25 by no_audit_record", format, sd)
		}
		if format == FormatCEF {
			_, ext, err := splitCEF(m.Msg)
			if err != nil {
				t.Fatal(err)
			}
			if ext["cfp1Label"] != "waitedSeconds" || ext["cfp1"] != "300.25" || ext["flexString1"] != "no_audit_record" {
				t.Errorf("CEF extension %v, want the wait", ext)
			}
		}
	}
	plain := store.Alert{ID: "x", Time: t0, Rule: "r", Severity: "low", Message: "m"}
	if line := string(formatSyslog(&plain, 1, "h", "1", "v", FormatCEF, 0)); strings.Contains(line, "waited") || strings.Contains(line, "cfp1") {
		t.Errorf("an alert that did not wait says it did: %s", line)
	}
}
