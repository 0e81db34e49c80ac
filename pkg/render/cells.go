package render

import (
	"strings"
	"time"

	"github.com/execid/correlator/pkg/auditlog"
	"github.com/execid/correlator/pkg/join"
)

// Cells: how one value is written in a table or tree, the same in every
// answer.

func short(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-1] + "…"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func flags(f []string) string { return orDash(strings.Join(f, ",")) }

func nodes(n []string) string { return orDash(strings.Join(n, ",")) }

// effectiveUser names who a request ran as, and who asked when that was
// someone else.
func effectiveUser(s *auditlog.ExecRecord) string {
	eff := s.Effective().Username
	if s.ImpersonatedUser == nil || eff == "" {
		return s.User.Username
	}
	return eff + " (as, by " + s.User.Username + ")"
}

// rfc3339 writes a time, or a dash when it is not known.
func rfc3339(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// startOf is when the process started: forked, or failing that exec'd.
func startOf(p *join.Process) time.Time {
	if p.Start.IsZero() {
		return p.ExecTime
	}
	return p.Start
}

// argv is the process's command line, cut to n, marked when the kernel
// captured only part of it.
func argv(p *join.Process, n int) string {
	a := strings.Join(p.Argv, " ")
	if p.ArgvTruncated {
		a += " …"
	}
	return short(a, n)
}

// command is a request's command, cut for a table.
func command(c []string) string { return short(strings.Join(c, " "), 60) }
