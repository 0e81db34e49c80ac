package alert

import (
	"path"
	"slices"
	"strings"

	"github.com/execid/correlator/pkg/join"
)

// Input is what rules see: a session, a process, or both (a process with
// its session).
type Input struct {
	Session *join.Session `json:"session,omitempty"`
	// Claimed is the session whose ID Process carried without being
	// attributed to it (a claimant: Process.AuditID is empty and
	// Process.ClaimedAuditID is Claimed.AuditID). It is the victim's
	// session, never the process's: it feeds only the claimant and
	// claimedUser keys and the claimedUser field, never user, group, the
	// location keys, command, flags or auditID. It is ignored unless
	// Process is a claimant of it.
	Claimed *join.Session     `json:"claimed,omitempty"`
	Process *join.Process     `json:"process,omitempty"`
	Labels  map[string]string `json:"labels,omitempty"` // pod labels when known
	// Settled says how the process's attribution had settled when it was
	// judged, and how long the alert waited for it (the caller's, see
	// EvaluateUnsettled); nil: at once. Only the alerts of rules that
	// read attribution carry it.
	Settled *Settled `json:"settled,omitempty"`
}

// claimant reports whether the input's process carried a session's ID
// without being attributed to it.
func (in *Input) claimant() bool {
	return in.Process != nil && in.Process.AuditID == "" && in.Process.ClaimedAuditID != ""
}

// claimed is the session the input's process claimed, when it is a
// claimant and the session is known.
func (in *Input) claimed() *join.Session {
	if !in.claimant() || in.Claimed == nil || in.Claimed.AuditID != in.Process.ClaimedAuditID {
		return nil
	}
	return in.Claimed
}

// claimedUsers are the claimed session's authenticated and impersonated
// usernames.
func (in *Input) claimedUsers() []string {
	return sessionUsers(in.claimed())
}

// users are the authenticated and impersonated usernames.
func (in *Input) users() []string {
	return sessionUsers(in.Session)
}

// otherUsers are the users of the other requests under the session's audit
// ID, less the session's own users.
func (in *Input) otherUsers() []string {
	if in.Session == nil {
		return nil
	}
	own := in.users()
	var out []string
	for i := range in.Session.Conflicts {
		c := &in.Session.Conflicts[i]
		for _, u := range sessionUsers(&join.Session{ExecRecord: *c}) {
			if !slices.Contains(own, u) && !slices.Contains(out, u) {
				out = append(out, u)
			}
		}
	}
	slices.Sort(out)
	return out
}

func sessionUsers(s *join.Session) []string {
	if s == nil {
		return nil
	}
	u := []string{s.User.Username}
	if s.ImpersonatedUser != nil {
		u = append(u, s.ImpersonatedUser.Username)
	}
	return u
}

func (in *Input) groups() []string {
	if in.Session == nil {
		return nil
	}
	g := in.Session.User.Groups
	if in.Session.ImpersonatedUser != nil {
		g = append(slices.Clip(g), in.Session.ImpersonatedUser.Groups...)
	}
	return g
}

// where returns the known values of a location field from the session and
// the process (they differ under pod_mismatch; either may match).
func (in *Input) where(field string) []string {
	var out []string
	add := func(s string) {
		if s != "" && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	if s := in.Session; s != nil {
		add(location(field, s.Namespace, s.Pod, s.Container))
	}
	if p := in.Process; p != nil {
		add(location(field, p.Namespace, p.Pod, p.Container))
	}
	return out
}

func location(field, namespace, pod, container string) string {
	switch field {
	case "namespace":
		return namespace
	case "pod":
		return pod
	}
	return container
}

// commands are the space-joined session command and process argv.
func (in *Input) commands() []string {
	var out []string
	if in.Session != nil && len(in.Session.Command) > 0 {
		out = append(out, strings.Join(in.Session.Command, " "))
	}
	if in.Process != nil && len(in.Process.Argv) > 0 {
		out = append(out, strings.Join(in.Process.Argv, " "))
	}
	return out
}

func (in *Input) flags() []string {
	var f []string
	if in.Session != nil {
		f = append(f, in.Session.Flags...)
	}
	if in.Process != nil {
		f = append(f, in.Process.Flags...)
	}
	return f
}

// envNames are the variable names the caller put into the exec
// environment: the --env list, and assignments after a leading `env`.
func (in *Input) envNames() []string {
	if in.Session == nil {
		return nil
	}
	var names []string
	for _, kv := range in.Session.Env {
		name, _, _ := strings.Cut(kv, "=")
		names = append(names, name)
	}
	return append(names, envCommandNames(in.Session.Command)...)
}

// envCommandNames reads `env [OPTION]... [NAME=VALUE]... [COMMAND]`:
// the names assigned before the command.
func envCommandNames(cmd []string) []string {
	if len(cmd) == 0 || path.Base(cmd[0]) != "env" {
		return nil
	}
	var names []string
	for i := 1; i < len(cmd); i++ {
		a := cmd[i]
		switch {
		case a == "--":
			continue
		case a == "-u" || a == "--unset" || a == "-C" || a == "--chdir" || a == "-S" || a == "--split-string":
			i++ // the option's argument
		case strings.HasPrefix(a, "-"):
		case strings.Contains(a, "="):
			name, _, _ := strings.Cut(a, "=")
			names = append(names, name)
		default:
			return names // the command
		}
	}
	return names
}

// matcher evaluates a Match, collecting the facts that matched.
type matcher struct {
	in    *Input
	facts []string
}

// anyValue matches p against vals, recording the first match as a fact.
func (mt *matcher) anyValue(field string, p *Patterns, vals []string) bool {
	for _, v := range vals {
		if p.match(v) {
			mt.facts = append(mt.facts, field+"="+v)
			return true
		}
	}
	return false
}

func (mt *matcher) match(m *Match) bool {
	in := mt.in
	if m.User != nil && !mt.anyValue("user", m.User, in.users()) {
		return false
	}
	if m.Group != nil && !mt.anyValue("group", m.Group, in.groups()) {
		return false
	}
	for _, f := range []struct {
		name string
		p    *Patterns
	}{{"namespace", m.Namespace}, {"pod", m.Pod}, {"container", m.Container}} {
		if f.p != nil && !mt.anyValue(f.name, f.p, in.where(f.name)) {
			return false
		}
	}
	if len(m.Labels) > 0 && !mt.labels(m.Labels) {
		return false
	}
	if m.Command != nil && !mt.anyValue("command", m.Command, in.commands()) {
		return false
	}
	if m.Argv != nil && (in.Process == nil || len(in.Process.Argv) == 0 ||
		!mt.anyValue("argv", m.Argv, []string{strings.Join(in.Process.Argv, " ")})) {
		return false
	}
	if m.Filename != nil && (in.Process == nil || !mt.anyValue("filename", m.Filename, []string{in.Process.Filename})) {
		return false
	}
	if m.EnvName != nil && !mt.anyValue("envName", m.EnvName, in.envNames()) {
		return false
	}
	if len(m.Attribution) > 0 {
		if in.Process == nil || !slices.Contains(m.Attribution, in.Process.Attribution) {
			return false
		}
		mt.facts = append(mt.facts, "attribution="+string(in.Process.Attribution))
	}
	if m.Flags != nil && !mt.flagsMatch(m.Flags) {
		return false
	}
	// A flag the audit log left unsaid matches neither true nor false.
	if m.TTY != nil && (in.Session == nil || in.Session.TTY == nil || *in.Session.TTY != *m.TTY) {
		return false
	}
	if m.Stdin != nil && (in.Session == nil || in.Session.Stdin == nil || *in.Session.Stdin != *m.Stdin) {
		return false
	}
	if m.Claimant != nil && (in.Process == nil || in.claimant() != *m.Claimant) {
		return false
	}
	if m.ClaimedUser != nil && !mt.anyValue("claimedUser", m.ClaimedUser, in.claimedUsers()) {
		return false
	}
	if m.OtherUser != nil && !mt.anyValue("otherUser", m.OtherUser, in.otherUsers()) {
		return false
	}
	if m.Subresource != nil && (in.Session == nil || !mt.anyValue("subresource", m.Subresource, []string{in.Session.Subresource})) {
		return false
	}
	if len(m.AnyOf) > 0 && !mt.anyOf(m.AnyOf) {
		return false
	}
	if m.Not != nil {
		sub := matcher{in: in}
		if sub.match(m.Not) {
			return false
		}
	}
	return true
}

func (mt *matcher) labels(want map[string]*Patterns) bool {
	keys := make([]string, 0, len(want))
	for k := range want {
		keys = append(keys, k)
	}
	slices.Sort(keys) // facts in a stable order, for a stable ID
	for _, k := range keys {
		v, ok := mt.in.Labels[k]
		if !ok || !want[k].match(v) {
			return false
		}
		mt.facts = append(mt.facts, "label."+k+"="+v)
	}
	return true
}

func (mt *matcher) flagsMatch(fm *FlagMatch) bool {
	have := mt.in.flags()
	for _, f := range fm.AllOf {
		if !slices.Contains(have, f) {
			return false
		}
	}
	var hit []string
	for _, f := range fm.AnyOf {
		if slices.Contains(have, f) {
			hit = append(hit, f)
		}
	}
	if len(fm.AnyOf) > 0 && len(hit) == 0 {
		return false
	}
	all := append(slices.Clone(fm.AllOf), hit...)
	slices.Sort(all)
	mt.facts = append(mt.facts, "flags="+strings.Join(slices.Compact(all), ","))
	return true
}

// anyOf keeps the facts of the first branch that matches.
func (mt *matcher) anyOf(ms []Match) bool {
	for i := range ms {
		sub := matcher{in: mt.in}
		if sub.match(&ms[i]) {
			mt.facts = append(mt.facts, sub.facts...)
			return true
		}
	}
	return false
}
