package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/execid/correlator/pkg/api"
	"github.com/execid/correlator/pkg/store"
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

func effectiveUser(s store.Session) string {
	if s.ImpersonatedUser != nil && s.ImpersonatedUser.Username != "" {
		return s.ImpersonatedUser.Username + " (as, by " + s.Username + ")"
	}
	return s.Username
}

func renderSessions(w io.Writer, p api.SessionPage) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "AUDIT-ID\tUSER\tNAMESPACE/POD\tCONTAINER\tSTARTED\tPROCS\tCODE\tFLAGS\tCOMMAND")
	for _, s := range p.Items {
		fmt.Fprintf(tw, "%s\t%s\t%s/%s\t%s\t%s\t%d\t%d\t%s\t%s\n", s.AuditID, effectiveUser(s), s.Namespace, s.Pod,
			orDash(s.Container), s.RequestReceived.UTC().Format(time.RFC3339), s.ProcessCount, s.Code, flags(s.Flags),
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
	for _, x := range p.Items {
		fmt.Fprintf(tw, "%s\t%d\t%s/%s\t%s\t%s\t%s\t%s\n", x.Start.UTC().Format(time.RFC3339), x.PID, orDash(x.Namespace),
			orDash(x.Pod), orDash(x.AuditID), orDash(x.Attribution), flags(x.Flags), short(strings.Join(x.Argv, " "), 70))
	}
	if p.NextCursor != "" {
		fmt.Fprintf(tw, "(more: --all, or the cursor %s)\n", p.NextCursor)
	}
	return tw.Flush()
}

func renderSession(w io.Writer, v api.SessionView) error {
	s := v.Session
	fmt.Fprintf(w, "Session:     %s\n", s.AuditID)
	fmt.Fprintf(w, "User:        %s\n", s.Username)
	if s.UID != "" {
		fmt.Fprintf(w, "UID:         %s\n", s.UID)
	}
	fmt.Fprintf(w, "Groups:      %s\n", orDash(strings.Join(s.Groups, ", ")))
	if s.ImpersonatedUser != nil {
		fmt.Fprintf(w, "Acting as:   %s (groups %s)\n", s.ImpersonatedUser.Username, orDash(strings.Join(s.ImpersonatedUser.Groups, ", ")))
	}
	fmt.Fprintf(w, "Source IPs:  %s\n", orDash(strings.Join(s.SourceIPs, ", ")))
	fmt.Fprintf(w, "User agent:  %s\n", orDash(s.UserAgent))
	fmt.Fprintf(w, "Target:      %s/%s container %s\n", s.Namespace, s.Pod, orDash(s.Container))
	fmt.Fprintf(w, "Request:     %s %s: %s\n", orDash(s.Verb), orDash(s.Subresource), strings.Join(s.Command, " "))
	fmt.Fprintf(w, "Decision:    %s %s (code %d)\n", orDash(s.Decision), s.Reason, s.Code)
	end := "still open"
	if s.End != nil {
		end = s.End.UTC().Format(time.RFC3339)
	}
	fmt.Fprintf(w, "Time:        %s to %s\n", s.RequestReceived.UTC().Format(time.RFC3339), end)
	fmt.Fprintf(w, "Flags:       %s\n", flags(s.Flags))
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
			fmt.Fprintf(w, "  %d %s %s/%s [%s]\n", c.PID, short(strings.Join(c.Argv, " "), 60),
				orDash(c.Namespace), orDash(c.Pod), flags(c.Flags))
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
	fmt.Fprintf(w, "%s%s%d %s (%s)%s%s\n", prefix, branch, n.PID, short(strings.Join(n.Argv, " "), 80), orDash(n.Attribution), exit, extra)
	for i, c := range n.Children {
		drawNode(w, c, prefix+next, i == len(n.Children)-1)
	}
}
