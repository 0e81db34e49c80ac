package alert

import (
	"slices"
	"strings"
	"testing"

	"github.com/execid/correlator/pkg/store"
)

// TestDefaultRules has a positive and a negative case per shipped rule;
// each case is evaluated against all the default rules, so a case that
// raises another rule than expected fails too.
func TestDefaultRules(t *testing.T) {
	type tc struct {
		name string
		in   func() Input
		want []string // rules raised
	}
	withFlags := func(pf, sf []string) func() Input {
		return func() Input {
			s, p := session(), process()
			p.Flags, s.Flags = pf, sf
			return Input{Session: s, Process: p}
		}
	}
	shell := func(mod func(*store.Session)) func() Input {
		return func() Input {
			s := session()
			s.Command, s.TTY, s.Stdin = []string{"/bin/bash"}, true, true
			if mod != nil {
				mod(s)
			}
			return Input{Session: s}
		}
	}
	cases := []tc{
		{"plain session and process", func() Input { return Input{Session: session(), Process: process()} }, nil},
		{"env_mismatch", withFlags([]string{"env_mismatch"}, nil), []string{"tamper-env-mismatch"}},
		{"env_removed is not env_mismatch", withFlags([]string{"env_removed"}, nil), nil},
		{"root_unverified", withFlags([]string{"root_unverified"}, nil), []string{"tamper-root-unverified"}},
		{"root verified", withFlags([]string{"nonstandard_id"}, nil), nil},
		{"pod_mismatch", withFlags([]string{"pod_mismatch"}, nil), []string{"tamper-pod-mismatch"}},
		{"denied_exec", withFlags([]string{"denied_exec"}, nil), []string{"tamper-denied-exec"}},
		{"failed_exec is not denied", withFlags([]string{"failed_exec"}, nil), nil},
		{"audit_id_conflict on the session", withFlags(nil, []string{"audit_id_conflict"}), []string{"tamper-audit-id-conflict"}},
		{"audit_id_conflict on the process", withFlags([]string{"audit_id_conflict"}, nil), []string{"tamper-audit-id-conflict"}},
		{"no_audit_record", func() Input {
			p := process()
			p.Flags, p.AuditID, p.ClaimedAuditID = []string{"no_audit_record"}, "", "f00"
			return Input{Process: p}
		}, []string{"no-audit-record"}},
		{"process without session, no flag", func() Input { return Input{Process: process()} }, nil},
		{"exec into kube-system", func() Input {
			s := session()
			s.Namespace, s.Pod = "kube-system", "coredns-1"
			return Input{Session: s}
		}, []string{"exec-kube-system"}},
		{"exec into kube-public", func() Input {
			s := session()
			s.Namespace = "kube-public"
			return Input{Session: s}
		}, nil},
		{"interactive bash", shell(nil), []string{"interactive-shell"}},
		{"interactive busybox sh", shell(func(s *store.Session) { s.Command = []string{"busybox", "sh"} }), []string{"interactive-shell"}},
		{"interactive /bin/sh -i", shell(func(s *store.Session) { s.Command = []string{"/bin/sh", "-i"} }), []string{"interactive-shell"}},
		{"interactive shell by system:masters", shell(func(s *store.Session) { s.Groups = append(s.Groups, "system:masters") }), nil},
		{"interactive shell impersonating system:masters", shell(func(s *store.Session) {
			s.ImpersonatedUser = &store.UserInfo{Username: "admin", Groups: []string{"system:masters"}}
		}), nil},
		{"shell without tty", shell(func(s *store.Session) { s.TTY = false }), nil},
		{"shell without stdin", shell(func(s *store.Session) { s.Stdin = false }), nil},
		{"interactive non-shell (top)", shell(func(s *store.Session) { s.Command = []string{"top"} }), nil},
		{"interactive bashful is not bash", shell(func(s *store.Session) { s.Command = []string{"bashful"} }), nil},
		{"--env LD_PRELOAD", func() Input {
			s := session()
			s.Env = []string{"KUBERNETES_EXEC_AUDIT_ID=x", "LD_PRELOAD=/tmp/x.so"}
			return Input{Session: s}
		}, []string{"caller-env-injection"}},
		{"--env PATH", func() Input {
			s := session()
			s.Env = []string{"PATH=/tmp:/usr/bin"}
			return Input{Session: s}
		}, []string{"caller-env-injection"}},
		{"env LD_PRELOAD= in the command", func() Input {
			s := session()
			s.Command = []string{"env", "-i", "LD_PRELOAD=/tmp/x.so", "ls"}
			return Input{Session: s}
		}, []string{"caller-env-injection"}},
		{"/usr/bin/env -u HOME PATH= in the command", func() Input {
			s := session()
			s.Command = []string{"/usr/bin/env", "-u", "HOME", "PATH=/tmp", "ls"}
			return Input{Session: s}
		}, []string{"caller-env-injection"}},
		{"harmless --env", func() Input {
			s := session()
			s.Env = []string{"KUBERNETES_EXEC_AUDIT_ID=x", "LANG=C", "MYPATH=/x"}
			return Input{Session: s}
		}, nil},
		{"PATH= after the command is an argument", func() Input {
			s := session()
			s.Command = []string{"env", "ls", "PATH=/tmp"}
			return Input{Session: s}
		}, nil},
		{"LD_PRELOAD set by a non-env command", func() Input {
			s := session()
			s.Command = []string{"echo", "LD_PRELOAD=/tmp/x.so"}
			return Input{Session: s}
		}, nil},
	}
	names := map[string]bool{}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newTestEngine(t, DefaultRules(), nil)
			got := ruleNames(e.Evaluate(c.in(), t0))
			slices.Sort(got)
			if !slices.Equal(got, c.want) {
				t.Errorf("raised %v, want %v", got, c.want)
			}
			for _, n := range got {
				names[n] = true
			}
		})
	}
	for _, r := range DefaultRules() {
		if !names[r.Name] {
			t.Errorf("no positive case for default rule %s", r.Name)
		}
	}
}

func TestDefaultRulesShellAllowGroups(t *testing.T) {
	rules, err := DefaultRulesWith(DefaultOptions{ShellAllowGroups: []string{"sre", "oncall-*"}})
	if err != nil {
		t.Fatal(err)
	}
	s := session()
	s.Command, s.TTY, s.Stdin = []string{"sh"}, true, true
	for _, tc := range []struct {
		groups []string
		want   bool
	}{{[]string{"dev"}, true}, {[]string{"oncall-eu"}, false}, {[]string{"sre"}, false}, {[]string{"system:masters"}, true}} {
		s.Groups = tc.groups
		e := newTestEngine(t, rules, nil)
		got := slices.Contains(ruleNames(e.Evaluate(Input{Session: s}, t0)), "interactive-shell")
		if got != tc.want {
			t.Errorf("groups %v: raised %v, want %v", tc.groups, got, tc.want)
		}
	}
}

func TestDefaultRulesMessages(t *testing.T) {
	s := session()
	s.Namespace, s.Pod, s.Command = "kube-system", "etcd-0", []string{"sh", "-c", "echo $(KUBERNETES_EXEC_AUDIT_ID) $$"}
	e := newTestEngine(t, DefaultRules(), nil)
	alerts := e.Evaluate(Input{Session: s}, t0)
	if len(alerts) != 1 {
		t.Fatalf("got %d alerts", len(alerts))
	}
	want := "alice@example.com exec'd into kube-system/etcd-0: sh -c echo $(KUBERNETES_EXEC_AUDIT_ID) $$"
	if alerts[0].Message != want {
		t.Errorf("message %q, want %q (captured values must not be expanded)", alerts[0].Message, want)
	}
	if !strings.Contains(string(alerts[0].Payload), `"name":"exec-kube-system"`) {
		t.Errorf("payload lacks the rule: %s", alerts[0].Payload)
	}
}
