package alert

import (
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"

	"github.com/execid/correlator/pkg/vocab"
)

func TestParseRulesErrors(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		good       int
		wantErr    []string // substrings, all required
	}{
		{"not yaml", "rules: [", 0, []string{"parsing rules"}},
		{"unknown top-level key", "rulez: []", 0, []string{"parsing rules", "rulez"}},
		{"unknown match key", "rules:\n- name: a\n  severity: low\n  message: m\n  match: {usr: bob}\n", 0, []string{"usr"}},
		{"missing name", "rules:\n- severity: low\n  message: m\n  match: {user: bob}\n", 0, []string{"rule 0:", "no name"}},
		{"bad severity", "rules:\n- name: a\n  severity: urgent\n  message: m\n  match: {user: bob}\n", 0, []string{"rule 0 (a)", `severity "urgent"`}},
		{"bad regex keeps the good rule", "rules:\n- name: good\n  severity: low\n  message: m\n  match: {user: bob}\n- name: bad\n  severity: low\n  message: m\n  match: {command: {regex: ['(']}}\n", 1, []string{"rule 1 (bad)", "match.command", "compiling regex"}},
		{"unknown template field", "rules:\n- name: a\n  severity: low\n  message: 'hi $(usr)'\n  match: {user: bob}\n", 0, []string{"rule 0 (a)", "$(usr)"}},
		{"empty match", "rules:\n- name: a\n  severity: low\n  message: m\n  match: {}\n", 0, []string{"match is empty"}},
		{"empty not", "rules:\n- name: a\n  severity: low\n  message: m\n  match: {user: bob, not: {}}\n", 0, []string{"match.not: empty"}},
		{"bad nested anyOf", "rules:\n- name: a\n  severity: low\n  message: m\n  match: {anyOf: [{user: x}, {group: {regex: ['[']}}]}\n", 0, []string{"match.anyOf[1].group"}},
		{"empty flags", "rules:\n- name: a\n  severity: low\n  message: m\n  match: {flags: {}}\n", 0, []string{"match.flags"}},
		{"duplicate names", "rules:\n- name: a\n  severity: low\n  message: m\n  match: {user: x}\n- name: a\n  severity: low\n  message: m\n  match: {user: yy}\n", 1, []string{"rule 1 (a)", "duplicate"}},
		{"bad scope", "rules:\n- name: a\n  severity: low\n  scope: pod\n  message: m\n  match: {user: x}\n", 0, []string{`scope "pod"`}},
		{"patterns of the wrong type", "rules:\n- name: a\n  severity: low\n  message: m\n  match: {user: 3}\n- name: b\n  severity: low\n  message: m\n  match: {user: x}\n", 1, []string{"rule 0 (a)", "want a glob"}},
		{"unknown match key names the rule", "rules:\n- name: ok\n  severity: low\n  message: m\n  match: {user: x}\n- name: typo\n  severity: low\n  message: m\n  match: {usr: bob}\n", 1, []string{"rule 1 (typo)", "usr"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rules, err := ParseRules([]byte(tc.yaml))
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if len(rules) != tc.good {
				t.Errorf("kept %d rules, want %d", len(rules), tc.good)
			}
		})
	}
}

func TestParseRulesShapes(t *testing.T) {
	y := `
rules:
- name: shapes
  severity: info
  message: "$(user) in $(label.app) $(label.missing)"
  match:
    user: "a*"
    group: [dev, "ops-?"]
    command: {glob: ["ls *"], regex: ['^cat ']}
    labels: {app: "web*"}
    attribution: [audit_id, inherited]
    flags: {allOf: [fx], anyOf: [fy, fz]}
`
	rules, err := ParseRules([]byte(y))
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	e := newTestEngine(t, rules, reg)
	in := Input{Session: session(), Process: process(), Labels: map[string]string{"app": "webshop"}}
	in.Process.Flags = []string{"fx", "fz"}
	got := e.Evaluate(in, t0)
	if len(got) != 1 {
		t.Fatalf("got %d alerts, want 1", len(got))
	}
	if want := "alice@example.com in webshop $(label.missing)"; got[0].Message != want {
		t.Errorf("message %q, want %q", got[0].Message, want)
	}
	if n := testutil.ToFloat64(e.m.templateUnresolved.WithLabelValues("shapes")); n != 1 {
		t.Errorf("unresolved template references counted %v, want 1", n)
	}
	// Each condition must be able to fail on its own.
	for name, mod := range map[string]func(*Input){
		"user":        func(in *Input) { in.Session.User.Username = "bob" },
		"group":       func(in *Input) { in.Session.User.Groups = []string{"ops-10"} },
		"command":     func(in *Input) { in.Session.Command = []string{"rm"}; in.Process.Argv = []string{"lsof"} },
		"label":       func(in *Input) { in.Labels = nil },
		"attribution": func(in *Input) { in.Process.Attribution = vocab.AttributionHeuristic },
		"allOf":       func(in *Input) { in.Process.Flags = []string{"fz"} },
		"anyOf":       func(in *Input) { in.Process.Flags = []string{"fx"} },
	} {
		in := Input{Session: session(), Process: process(), Labels: map[string]string{"app": "webshop"}}
		in.Process.Flags = []string{"fx", "fz"}
		mod(&in)
		if got := newTestEngine(t, rules, nil).Evaluate(in, t0); len(got) != 0 {
			t.Errorf("%s: still matched", name)
		}
	}
}

func TestRuleErrorsCounted(t *testing.T) {
	_, err := ParseRules([]byte("rules:\n- name: a\n  severity: x\n  message: m\n  match: {user: u}\n- name: b\n  severity: y\n  message: m\n  match: {user: u}\n"))
	var re *RuleError
	if !errors.As(err, &re) {
		t.Fatalf("error %v is not a *RuleError", err)
	}
	reg := prometheus.NewRegistry()
	e := newTestEngine(t, DefaultRules(), reg)
	if n := e.CountRuleErrors(err); n != 2 {
		t.Errorf("counted %d, want 2", n)
	}
	if v := testutil.ToFloat64(e.m.ruleErrors); v != 2 {
		t.Errorf("metric %v, want 2", v)
	}
}

func TestGlob(t *testing.T) {
	for _, tc := range []struct {
		glob, s string
		want    bool
	}{
		{"*", "", true}, {"a*", "abc", true}, {"a*", "ba", false}, {"*/bash", "/usr/bin/bash", true},
		{"a?c", "abc", true}, {"a?c", "ac", false}, {`a\*`, "a*", true}, {`a\*`, "ab", false},
		{"a.c", "abc", false}, {"(x)", "(x)", true}, {"*", "a\nb", true}, {"é*", "été", true},
	} {
		p := Patterns{Glob: []string{tc.glob}}
		if err := p.compile(); err != nil {
			t.Fatal(err)
		}
		if got := p.match(tc.s); got != tc.want {
			t.Errorf("glob %q on %q = %v", tc.glob, tc.s, got)
		}
	}
}

func FuzzParseRules(f *testing.F) {
	f.Add(defaultRulesYAML)
	f.Add([]byte("rules:\n- name: a\n  severity: low\n  message: $(user)\n  match: {not: {anyOf: [{user: x}]}}\n"))
	f.Add([]byte("rules: [{name: b, severity: high, message: m, match: {labels: {a: {regex: ['.']}}}}]"))
	f.Fuzz(func(t *testing.T, data []byte) {
		rules, err := ParseRules(data)
		for _, r := range rules {
			if !r.compiled {
				t.Fatalf("rule %s returned uncompiled", r.Name)
			}
		}
		if err == nil && len(rules) > 0 {
			e, err := NewEngine(rules, zerologNop, nil)
			if err != nil {
				t.Fatalf("parsed rules do not load: %v", err)
			}
			e.Evaluate(Input{Session: session(), Process: process()}, t0)
		}
	})
}

var zerologNop = zerolog.Nop()
