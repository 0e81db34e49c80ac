package render

import (
	"fmt"
	"io"
	"strings"

	"github.com/execid/correlator/pkg/api"
	"github.com/execid/correlator/pkg/cluster"
)

// Session is one node's session: who, from where, and its process tree
// (correlator session). Wide is the table. A session with pending
// processes ends with when to ask again.
func (p *Printer) Session(v api.SessionView) error {
	if done, err := p.encode(v); done {
		return err
	}
	writeSession(p.w, &v)
	var w waits
	w.addView(&v)
	w.write(p.w)
	return nil
}

// SessionViews is a session from every node that holds it (kubectl
// correlator session): an audit ID held by several requests prints each.
func (p *Printer) SessionViews(a cluster.Answer[cluster.SessionView]) error {
	if done, err := p.encode(a); done {
		return err
	}
	if len(a.Items) > 1 {
		fmt.Fprintf(p.w, "Audit ID %s is held by %d different requests (replayed, or reused across nodes):\n\n",
			a.Items[0].AuditID, len(a.Items))
	}
	var w waits
	for i := range a.Items {
		if i > 0 {
			fmt.Fprintln(p.w)
		}
		fmt.Fprintf(p.w, "Node:        %s\n", nodes(a.Items[i].Nodes))
		writeSession(p.w, &a.Items[i].SessionView)
		w.addView(&a.Items[i].SessionView)
	}
	w.write(p.w)
	return nil
}

// addView counts a session's pending processes, its claimants too.
func (w *waits) addView(v *api.SessionView) {
	w.add(v.Processes)
	w.add(v.Claimants)
}

func writeSession(w io.Writer, v *api.SessionView) {
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
			wait := ""
			if c.Pending {
				wait = " (" + waitNote(c) + ")"
			}
			fmt.Fprintf(w, "  %d %s %s/%s [%s]%s\n", c.PID, argv(c, 60), orDash(c.Namespace), orDash(c.Pod), flags(c.Flags), wait)
		}
	}
	if s.Env != nil {
		fmt.Fprintf(w, "Caller env:  %s\n", strings.Join(s.Env, " "))
	}
}

// drawNode writes one process of the tree and, indented, its children.
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
	fmt.Fprintf(w, "%s%s%d %s (%s)%s%s\n", prefix, branch, n.PID, argv(&n.Process, 80), attributionLine(&n.Process), exit, extra)
	for i, c := range n.Children {
		drawNode(w, c, prefix+next, i == len(n.Children)-1)
	}
}
