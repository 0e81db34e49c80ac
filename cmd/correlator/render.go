package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/execid/correlator/pkg/api"
	"github.com/execid/correlator/pkg/auditlog"
	"github.com/execid/correlator/pkg/join"
)

// Rendering is pure: it writes kubectl-style tables from API responses.

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

func renderSessions(w io.Writer, p api.SessionPage) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "AUDIT-ID\tUSER\tNAMESPACE/POD\tCONTAINER\tSTARTED\tPROCS\tCODE\tFLAGS\tCOMMAND")
	for i := range p.Items {
		s := &p.Items[i]
		fmt.Fprintf(tw, "%s\t%s\t%s/%s\t%s\t%s\t%d\t%d\t%s\t%s\n", s.AuditID, effectiveUser(&s.ExecRecord), s.Namespace, s.Pod,
			orDash(s.Container), rfc3339(s.RequestReceivedTimestamp), s.ProcessCount, s.Code, flags(s.Flags),
			short(strings.Join(s.Command, " "), 60))
	}
	if p.NextCursor != "" {
		fmt.Fprintf(tw, "(more: --all, or the cursor %s)\n", p.NextCursor)
	}
	return tw.Flush()
}

func renderProcesses(w io.Writer, p api.ProcessPage) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "STARTED\tPID\tNAMESPACE/POD\tAUDIT-ID\tATTRIBUTION\tFLAGS\tARGV")
	for i := range p.Items {
		x := &p.Items[i]
		fmt.Fprintf(tw, "%s\t%d\t%s/%s\t%s\t%s\t%s\t%s\n", rfc3339(startOf(x)), x.PID, orDash(x.Namespace),
			orDash(x.Pod), orDash(x.AuditID), orDash(string(x.Attribution)), flags(x.Flags), argv(x, 70))
	}
	if p.NextCursor != "" {
		fmt.Fprintf(tw, "(more: --all, or the cursor %s)\n", p.NextCursor)
	}
	return tw.Flush()
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

func renderSession(w io.Writer, v api.SessionView) error {
	s := &v.Session
	fmt.Fprintf(w, "Session:     %s\n", s.AuditID)
	fmt.Fprintf(w, "User:        %s\n", s.User.Username)
	if s.User.UID != "" {
		fmt.Fprintf(w, "UID:         %s\n", s.User.UID)
	}
	fmt.Fprintf(w, "Groups:      %s\n", orDash(strings.Join(s.User.Groups, ", ")))
	if u := s.ImpersonatedUser; u != nil {
		fmt.Fprintf(w, "Acting as:   %s (groups %s)\n", u.Username, orDash(strings.Join(u.Groups, ", ")))
	}
	fmt.Fprintf(w, "Source IPs:  %s\n", orDash(strings.Join(s.SourceIPs, ", ")))
	fmt.Fprintf(w, "User agent:  %s\n", orDash(s.UserAgent))
	fmt.Fprintf(w, "Target:      %s/%s container %s\n", s.Namespace, s.Pod, orDash(s.Container))
	fmt.Fprintf(w, "Request:     %s %s: %s\n", orDash(s.Verb), orDash(s.Subresource), strings.Join(s.Command, " "))
	fmt.Fprintf(w, "Decision:    %s %s (code %d)\n", orDash(s.Decision), s.Reason, s.Code)
	end := "still open"
	if !s.EndTimestamp.IsZero() {
		end = rfc3339(s.EndTimestamp)
	}
	fmt.Fprintf(w, "Time:        %s to %s\n", rfc3339(s.RequestReceivedTimestamp), end)
	if s.SPOExecRequestUID != "" {
		fmt.Fprintf(w, "SPO UID:     %s\n", s.SPOExecRequestUID)
	}
	fmt.Fprintf(w, "Flags:       %s\n", flags(s.Flags))
	for i := range s.Conflicts {
		c := &s.Conflicts[i]
		fmt.Fprintf(w, "Same ID:     %s at %s from %s: %s %s/%s (code %d)\n", effectiveUser(c),
			rfc3339(c.RequestReceivedTimestamp), orDash(strings.Join(c.SourceIPs, ", ")), strings.Join(c.Command, " "),
			c.Namespace, c.Pod, c.Code)
	}
	fmt.Fprintf(w, "Processes:   %d\n", len(v.Processes))
	for i, n := range v.Tree {
		drawNode(w, n, "", i == len(v.Tree)-1)
	}
	if v.ProcessesTruncated {
		fmt.Fprintln(w, "(process list truncated)")
	}
	if len(v.Claimants) > 0 {
		fmt.Fprintf(w, "Claimed by:  %d process(es) that carried this ID but are not attributed to it\n", len(v.Claimants))
		for i := range v.Claimants {
			c := &v.Claimants[i]
			fmt.Fprintf(w, "  %d %s %s/%s [%s]\n", c.PID, argv(c, 60), orDash(c.Namespace), orDash(c.Pod), flags(c.Flags))
		}
	}
	if s.Env != nil {
		fmt.Fprintf(w, "Caller env:  %s\n", strings.Join(s.Env, " "))
	}
	return nil
}

func drawNode(w io.Writer, n *api.TreeNode, prefix string, last bool) {
	branch, next := "├─ ", "│  "
	if last {
		branch, next = "└─ ", "   "
	}
	exit := ""
	if n.ExitCode != nil {
		exit = fmt.Sprintf(" exit=%d", *n.ExitCode)
	}
	extra := ""
	if len(n.Flags) > 0 {
		extra = " [" + strings.Join(n.Flags, ",") + "]"
	}
	if n.ClaimedAuditID != "" {
		extra += " claimed=" + n.ClaimedAuditID
	}
	if len(n.Candidates) > 0 {
		// An ambiguous process is nobody's: name every session it may be.
		extra += " candidates=" + strings.Join(n.Candidates, ",")
	}
	fmt.Fprintf(w, "%s%s%d %s (%s)%s%s\n", prefix, branch, n.PID, argv(&n.Process, 80), orDash(string(n.Attribution)), exit, extra)
	for i, c := range n.Children {
		drawNode(w, c, prefix+next, i == len(n.Children)-1)
	}
}
