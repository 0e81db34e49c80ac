package alert

import (
	"github.com/execid/correlator/pkg/join"
	"testing"

	"github.com/execid/correlator/pkg/auditlog"
)

// claimedVictim makes the claimed session differ from the claimant in
// everything a rule could match, so that a leak into a key shows.
func claimedVictim(in *Input) {
	c := in.Claimed
	c.ImpersonatedUser = &auditlog.UserInfo{Username: "admin", Groups: []string{"system:masters"}}
	c.User.UID, c.SourceIPs = "u-1", []string{"10.0.0.7"}
	c.Namespace, c.Pod, c.Container = "kube-system", "etcd-0", "etcd"
	c.Command, c.Env, c.TTY, c.Stdin = []string{"cat", "/etc/shadow"}, []string{"LD_PRELOAD=/x.so"}, yes(), yes()
	c.Flags = []string{"audit_id_conflict"}
}

// TestClaimantMatch: the claimant and claimedUser keys, and that the
// claimed session never matches as the process's own (user, group,
// location, command, env, flags, tty).
func TestClaimantMatch(t *testing.T) {
	claimant := func() Input { in := claimantInput(); claimedVictim(&in); return in }
	unknown := func() Input { in := claimant(); in.Claimed = nil; return in }
	attributed := func() Input { return Input{Session: session(), Process: process()} }
	envMismatch := func() Input {
		in := attributed()
		in.Process.ClaimedAuditID = "forged"
		return in
	}
	sessionOnly := func() Input { return Input{Session: session()} }
	unattributed := func() Input { in := claimant(); in.Process.ClaimedAuditID = ""; return in }
	for _, tc := range []struct {
		name  string
		match string
		in    func() Input
		want  bool
	}{
		{"claimant true on a claimant", "claimant: true", claimant, true},
		{"claimant true on a claimant of an unknown ID", "claimant: true", unknown, true},
		{"claimant true on an attributed process", "claimant: true", attributed, false},
		{"claimant true on an env_mismatch (attributed, with a claim)", "claimant: true", envMismatch, false},
		{"claimant true on a process with no ID", "claimant: true", unattributed, false},
		{"claimant false on an attributed process", "claimant: false", attributed, true},
		{"claimant false on a claimant", "claimant: false", claimant, false},
		{"claimant false on a session alone", "claimant: false", sessionOnly, false},
		{"not claimant on a session alone", "not: {claimant: true}", sessionOnly, true},
		{"claimedUser, authenticated", "claimedUser: 'alice*'", claimant, true},
		{"claimedUser, impersonated", "claimedUser: admin", claimant, true},
		{"claimedUser, another user", "claimedUser: bob", claimant, false},
		{"claimedUser of an unknown session", "claimedUser: '*'", unknown, false},
		{"claimedUser is not the process's own session", "claimedUser: '*'", attributed, false},
		{"claimedUser with Claimed beside an attributed process", "claimedUser: '*'", func() Input {
			in := claimant()
			in.Process.AuditID = in.Process.ClaimedAuditID
			return in
		}, false},
		{"user is not the claimed user", "user: 'alice*'", claimant, false},
		{"user is not the claimed impersonated user", "user: admin", claimant, false},
		{"group is not the claimed user's", "group: [dev, 'system:masters']", claimant, false},
		{"namespace is the process's", "namespace: shop", claimant, true},
		{"namespace is not the claimed session's", "namespace: kube-system", claimant, false},
		{"command is not the claimed session's", "command: 'cat *'", claimant, false},
		{"envName is not the claimed session's", "envName: LD_PRELOAD", claimant, false},
		{"flags are not the claimed session's", "flags: {anyOf: [audit_id_conflict]}", claimant, false},
		{"tty is not the claimed session's", "tty: true", claimant, false},
		{"subresource of the session", "subresource: exec", execInto(attributed), true},
		{"subresource, another", "subresource: [attach, ephemeralcontainers]", execInto(attributed), false},
		{"subresource is not the claimed session's", "subresource: exec", execInto(claimant), false},
		{"not subresource on a claimant", "not: {subresource: exec}", execInto(claimant), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rules, err := ParseRules([]byte("rules:\n- name: r\n  severity: low\n  message: m\n  match: {" + tc.match + "}\n"))
			if err != nil {
				t.Fatal(err)
			}
			got := len(newTestEngine(t, rules, nil).Evaluate(tc.in(), t0)) == 1
			if got != tc.want {
				t.Errorf("matched %v, want %v", got, tc.want)
			}
		})
	}
}

// execInto sets the subresource of in's sessions, its own and claimed, to
// exec.
func execInto(in func() Input) func() Input {
	return func() Input {
		i := in()
		for _, s := range []*join.Session{i.Session, i.Claimed} {
			if s != nil {
				s.Subresource = "exec"
			}
		}
		return i
	}
}

// TestClaimantFields: a claimant's alert names the claimed user only in
// claimedUser; the user fields stay empty.
func TestClaimantFields(t *testing.T) {
	const msg = "user=$(user) imp=$(impersonatedUser) uid=$(userUID) groups=$(groups) ip=$(sourceIP) cmd=$(command) " +
		"env=$(envNames) tty=$(tty) audit=$(auditID) | claimed=$(claimedUser) id=$(claimedAuditID) " +
		"ctr=$(containerID) at=$(namespace)/$(pod)/$(container) matched=$(matched)"
	for _, tc := range []struct {
		name string
		in   func() Input
		want string
	}{
		{"claimant", func() Input { in := claimantInput(); claimedVictim(&in); return in },
			"user= imp= uid= groups= ip= cmd= env= tty=false audit= | claimed=alice@example.com as admin " +
				"id=5b5e2e4c-0000-4000-8000-000000000001 ctr=e9ca6c735a09 at=shop/web-0/app matched=claimedUser=alice@example.com"},
		{"claimant of an unknown ID", func() Input { in := claimantInput(); in.Claimed = nil; return in },
			"user= imp= uid= groups= ip= cmd= env= tty=false audit= | claimed= " +
				"id=5b5e2e4c-0000-4000-8000-000000000001 ctr=e9ca6c735a09 at=shop/web-0/app matched=filename=/bin/ls"},
		{"attributed", func() Input {
			in := Input{Session: session(), Process: process()}
			in.Process.ContainerID = "c0ffee"
			return in
		}, "user=alice@example.com imp= uid= groups=system:authenticated,dev ip= cmd=ls -l env= tty=unknown " +
			"audit=5b5e2e4c-0000-4000-8000-000000000001 | claimed= id= ctr=c0ffee at=shop/web-0/app matched=filename=/bin/ls"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rules, err := ParseRules([]byte("rules:\n- name: r\n  severity: low\n  message: '" + msg + "'\n" +
				"  match: {anyOf: [{claimedUser: '*'}, {filename: '*'}]}\n"))
			if err != nil {
				t.Fatal(err)
			}
			alerts := newTestEngine(t, rules, nil).Evaluate(tc.in(), t0)
			if len(alerts) != 1 {
				t.Fatalf("%d alerts", len(alerts))
			}
			if alerts[0].Message != tc.want {
				t.Errorf("message\n%q, want\n%q", alerts[0].Message, tc.want)
			}
		})
	}
}
