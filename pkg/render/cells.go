package render

import (
	"fmt"
	"io"
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

// attribution is how the process is attributed, or, while its answer may
// still change, that it waits and until when at the latest: an
// unattributed process is not yet nobody's then.
func attribution(p *join.Process) string {
	if p.Pending {
		return "pending until " + rfc3339(p.PendingUntil)
	}
	return orDash(string(p.Attribution))
}

// attributionLine is attribution in a line of its own (a tree, a
// session's process lines): a pending process says what it waits for.
func attributionLine(p *join.Process) string {
	if p.Pending {
		return waitNote(p)
	}
	return orDash(string(p.Attribution))
}

// waitNote says what a pending process waits for, and until when: a
// process that carried an ID waits for its audit record, an exec root
// without one for the exec requests of its pod that could fit it.
func waitNote(p *join.Process) string {
	what := "its pod's exec records"
	if p.ClaimedAuditID != "" || p.SPOExecRequestUID != "" {
		what = "its audit record"
	}
	return "pending: waiting for " + what + " until " + rfc3339(p.PendingUntil)
}

// waits counts an answer's pending processes and their latest deadline.
type waits struct {
	n    int
	last time.Time
}

func (w *waits) add(ps []join.Process) {
	for i := range ps {
		if p := &ps[i]; p.Pending {
			w.n++
			if p.PendingUntil.After(w.last) {
				w.last = p.PendingUntil
			}
		}
	}
}

// write ends an answer that holds pending processes with when to ask
// again; it writes nothing otherwise.
func (w *waits) write(out io.Writer) {
	switch w.n {
	case 0:
		return
	case 1:
		fmt.Fprintf(out, "(1 process still pending: its attribution may change until %s; ask again after then)\n",
			rfc3339(w.last))
	default:
		fmt.Fprintf(out, "(%d processes still pending: their attribution may change until %s; ask again after then)\n",
			w.n, rfc3339(w.last))
	}
}
