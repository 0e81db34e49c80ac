package alert

import (
	"cmp"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/execid/correlator/pkg/auditlog"
	"github.com/execid/correlator/pkg/join"
)

// TestDefaultRules has a positive and a negative case per shipped rule;
// each case is evaluated against all the default rules, so a case that
// raises another rule than expected fails too.
// reusedBy is session() with a second request under its ID by user ("":
// the session's own).
func reusedBy(user string) func() Input {
	return func() Input {
		s := session()
		other := s.ExecRecord
		other.User = auditlog.UserInfo{Username: cmp.Or(user, s.User.Username)}
		other.RequestURI += "&again"
		s.Conflicts, s.Flags = []auditlog.ExecRecord{other}, []string{"audit_id_conflict"}
		return Input{Session: s}
	}
}

// TestReusedIDAlertsNameBothUsers: the reuse alerts name both users, both
// requests, and the real pod, container and process.
func TestReusedIDAlertsNameBothUsers(t *testing.T) {
	e := newTestEngine(t, DefaultRules(), nil)
	in := reusedBy("mallory")()
	in.Session.AuditID += "~0123456789ab"
	var msg string
	for _, a := range e.Evaluate(in, t0) {
		if a.Rule == "audit-id-reused" {
			msg = a.Message
		}
	}
	s := in.Session
	for _, want := range []string{s.User.Username, "mallory", s.RequestURI, s.Conflicts[0].RequestURI, s.Conflicts[0].AuditID,
		s.Namespace + "/" + s.Pod + "/" + s.Container} {
		if !strings.Contains(msg, want) {
			t.Errorf("audit-id-reused message %q lacks %q", msg, want)
		}
	}
	in = claimantInput()
	in.Process.Flags = []string{"audit_id_reused"}
	msg = ""
	for _, a := range e.Evaluate(in, t0) {
		if a.Rule == "audit-id-reused-root" {
			msg = a.Message
		}
	}
	p := in.Process
	for _, want := range []string{in.Claimed.User.Username, p.ProcessID, p.ContainerID, p.Pod, p.ClaimedAuditID} {
		if !strings.Contains(msg, want) {
			t.Errorf("audit-id-reused-root message %q lacks %q", msg, want)
		}
	}
}

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
	// claimant is a process that carried session()'s ID without being
	// attributed to it, with that session as Claimed (known is false: the
	// ID names no session the agent holds).
	claimant := func(known bool, flags ...string) func() Input {
		return func() Input {
			in := claimantInput()
			in.Process.Flags = flags
			if !known {
				in.Claimed = nil
			}
			return in
		}
	}
	shell := func(mod func(*join.Session)) func() Input {
		return func() Input {
			s := session()
			s.Command, s.TTY, s.Stdin = []string{"/bin/bash"}, yes(), yes()
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
		{"root_unverified vouched for (attributed to the session)", withFlags([]string{"root_unverified"}, nil), []string{"tamper-root-unverified"}},
		{"kubectl debug's container: its init's ID is the runtime's, attributed by the pairing", func() Input {
			in := withFlags([]string{"root_unverified"}, nil)()
			in.Session.Subresource = "ephemeralcontainers"
			return in
		}, nil},
		{"a claimant of a debug session is still flagged", func() Input {
			in := claimantInput()
			in.Process.Flags = []string{"root_unverified"}
			in.Claimed.Subresource = "ephemeralcontainers"
			return in
		}, []string{"borrowed-audit-id"}},
		{"root verified", withFlags([]string{"nonstandard_id"}, nil), nil},
		{"SPO session set by its first program, attributed", withFlags([]string{"root_unverified", "root_indirect"}, nil), nil},
		{"root_indirect claimant of a known session", claimant(true, "root_unverified", "root_indirect"), []string{"borrowed-audit-id"}},
		{"root_indirect claimant of an unknown ID", claimant(false, "root_unverified", "root_indirect"), []string{"tamper-root-unverified"}},
		{"root_unverified claimant of a known session", claimant(true, "root_unverified"), []string{"borrowed-audit-id"}},
		{"root_unverified claimant of an unknown ID", claimant(false, "root_unverified"), []string{"tamper-root-unverified"}},
		{"root_unverified claimant past the pending TTL", claimant(false, "root_unverified", "no_audit_record"),
			[]string{"no-audit-record", "tamper-root-unverified"}},
		{"root_unverified claimant with another session as Claimed", func() Input {
			in := claimantInput()
			in.Process.Flags = []string{"root_unverified"}
			in.Claimed.AuditID = "another"
			return in
		}, []string{"tamper-root-unverified"}},
		{"Claimed beside an attributed process is ignored", func() Input {
			in := claimantInput()
			in.Process.Flags, in.Process.AuditID = []string{"root_unverified"}, in.Process.ClaimedAuditID
			return in
		}, []string{"tamper-root-unverified"}},
		{"verified claimant (pod_mismatch) is not borrowed", claimant(true, "pod_mismatch"), []string{"tamper-pod-mismatch"}},
		{"root_unverified claimant with pod_mismatch", claimant(true, "root_unverified", "pod_mismatch"),
			[]string{"borrowed-audit-id", "tamper-pod-mismatch"}},
		{"denied_exec", claimant(true, "denied_exec"), []string{"tamper-denied-exec"}},
		{"failed_exec is not denied", claimant(true, "failed_exec"), nil},
		{"audit_id_conflict on the session", withFlags(nil, []string{"audit_id_conflict"}), []string{"tamper-audit-id-conflict"}},
		{"audit_id_conflict on the process", withFlags([]string{"audit_id_conflict"}, nil), []string{"tamper-audit-id-conflict"}},
		{"no_audit_record", claimant(false, "no_audit_record"), []string{"no-audit-record"}},
		{"another user reused the session's ID", reusedBy("mallory"), []string{"audit-id-reused", "tamper-audit-id-conflict"}},
		{"the same user's second request under one ID", reusedBy(""), []string{"tamper-audit-id-conflict"}},
		{"a root no request is left for", claimant(true, "audit_id_reused"), []string{"audit-id-reused-root"}},
		{"process without session, no flag", func() Input { return Input{Process: process()} }, nil},
		{"an exec no request explains", func() Input {
			p := process()
			p.Flags = []string{"uncovered_exec"}
			return Input{Process: p}
		}, []string{"uncovered-exec"}},
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
		{"interactive busybox sh", shell(func(s *join.Session) { s.Command = []string{"busybox", "sh"} }), []string{"interactive-shell"}},
		{"interactive /bin/sh -i", shell(func(s *join.Session) { s.Command = []string{"/bin/sh", "-i"} }), []string{"interactive-shell"}},
		{"interactive shell by system:masters", shell(func(s *join.Session) { s.User.Groups = append(s.User.Groups, "system:masters") }), nil},
		{"interactive shell impersonating system:masters", shell(func(s *join.Session) {
			s.ImpersonatedUser = &auditlog.UserInfo{Username: "admin", Groups: []string{"system:masters"}}
		}), nil},
		{"shell without tty", shell(func(s *join.Session) { s.TTY = no() }), nil},
		{"shell without stdin", shell(func(s *join.Session) { s.Stdin = no() }), nil},
		{"interactive non-shell (top)", shell(func(s *join.Session) { s.Command = []string{"top"} }), nil},
		{"interactive bashful is not bash", shell(func(s *join.Session) { s.Command = []string{"bashful"} }), nil},
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
	s.Command, s.TTY, s.Stdin = []string{"sh"}, yes(), yes()
	for _, tc := range []struct {
		groups []string
		want   bool
	}{{[]string{"dev"}, true}, {[]string{"oncall-eu"}, false}, {[]string{"sre"}, false}, {[]string{"system:masters"}, true}} {
		s.User.Groups = tc.groups
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

// TestDefaultRulesClaimantMessages: the alerts about claimants name the
// claimed session's user and ID (never as the process's user) and the
// process's real place.
func TestDefaultRulesClaimantMessages(t *testing.T) {
	for _, tc := range []struct {
		name  string
		flags []string
		imp   bool
		want  map[string]string // rule: message
	}{
		{"borrowed", []string{"root_unverified"}, false, map[string]string{
			"borrowed-audit-id": "process /bin/ls (pid 1234, 1234-1700000000000000000) in shop/web-0/app [container e9ca6c735a09] " +
				"carried audit ID 5b5e2e4c-0000-4000-8000-000000000001 of alice@example.com without being part of that session: " +
				"not attributed to alice@example.com",
		}},
		{"borrowed from an impersonating session", []string{"root_unverified"}, true, map[string]string{
			"borrowed-audit-id": "process /bin/ls (pid 1234, 1234-1700000000000000000) in shop/web-0/app [container e9ca6c735a09] " +
				"carried audit ID 5b5e2e4c-0000-4000-8000-000000000001 of alice@example.com as admin without being part of that session: " +
				"not attributed to alice@example.com as admin",
		}},
		{"pod_mismatch", []string{"pod_mismatch"}, false, map[string]string{
			"tamper-pod-mismatch": "audit ID 5b5e2e4c-0000-4000-8000-000000000001 of user alice@example.com seen in shop/web-0/app, " +
				"not where the exec request went (process /bin/ls, pid 1234)",
		}},
		{"denied_exec", []string{"denied_exec"}, false, map[string]string{
			"tamper-denied-exec": "process /bin/ls (pid 1234) in shop/web-0 carries audit ID 5b5e2e4c-0000-4000-8000-000000000001 " +
				"of a refused exec by alice@example.com",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := claimantInput()
			in.Process.Flags = tc.flags
			if tc.imp {
				in.Claimed.ImpersonatedUser = &auditlog.UserInfo{Username: "admin", Groups: []string{"system:masters"}}
			}
			alerts := newTestEngine(t, DefaultRules(), nil).Evaluate(in, t0)
			if len(alerts) != len(tc.want) {
				t.Fatalf("raised %v, want %d alerts", ruleNames(alerts), len(tc.want))
			}
			for _, a := range alerts {
				if want := tc.want[a.Rule]; a.Message != want {
					t.Errorf("%s: message\n%q, want\n%q", a.Rule, a.Message, want)
				}
				if a.AuditID != "" || a.ProcessID != in.Process.ProcessID {
					t.Errorf("%s: alert names session %q, process %q; want no session, the process", a.Rule, a.AuditID, a.ProcessID)
				}
				var pl struct {
					Session *join.Session `json:"session"`
					Claimed *join.Session `json:"claimed"`
				}
				if err := json.Unmarshal(a.Payload, &pl); err != nil {
					t.Fatal(err)
				}
				if pl.Session != nil || pl.Claimed == nil || pl.Claimed.User.Username != "alice@example.com" {
					t.Errorf("%s: payload session %v, claimed %v; want none, alice's", a.Rule, pl.Session, pl.Claimed)
				}
			}
		})
	}
}

func yes() *bool { b := true; return &b }
func no() *bool  { b := false; return &b }
