package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/execid/correlator/pkg/cluster"
	"github.com/execid/correlator/pkg/join"
)

// Rendering of the plugin's answers: pure, kubectl-style tables.

func nodes(n []string) string { return orDash(strings.Join(n, ",")) }

func renderClusterSessions(w io.Writer, a cluster.Answer[cluster.Session], wide bool) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	head := "STARTED\tUSER\tNAMESPACE/POD\tCONTAINER\tNODE\tPROCS\tAUDIT-ID"
	if wide {
		head += "\tCODE\tFLAGS\tSOURCE-IPS"
	}
	fmt.Fprintln(tw, head+"\tCOMMAND")
	for i := range a.Items {
		s := &a.Items[i]
		fmt.Fprintf(tw, "%s\t%s\t%s/%s\t%s\t%s\t%d\t%s", rfc3339(s.RequestReceivedTimestamp), effectiveUser(&s.ExecRecord),
			s.Namespace, s.Pod, orDash(s.Container), nodes(s.Nodes), s.ProcessCount, s.AuditID)
		if wide {
			fmt.Fprintf(tw, "\t%d\t%s\t%s", s.Code, flags(s.Flags), orDash(strings.Join(s.SourceIPs, ",")))
		}
		fmt.Fprintf(tw, "\t%s\n", short(strings.Join(s.Command, " "), 60))
	}
	if a.Truncated {
		fmt.Fprintln(tw, "(more sessions: raise --limit or narrow with --since)")
	}
	return tw.Flush()
}

func renderWho(w io.Writer, a cluster.WhoAnswer, wide bool) error {
	switch {
	case a.Node != "":
		fmt.Fprintf(w, "Pod %s/%s on node %s\n", a.Namespace, a.Pod, a.Node)
	default:
		fmt.Fprintf(w, "Pod %s/%s is not running on a node: asked every node\n", a.Namespace, a.Pod)
	}
	if len(a.Items) == 0 {
		fmt.Fprintln(w, "No exec sessions recorded.")
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	head := "STARTED\tUSER\tCONTAINER\tPROCS\tCODE\tAUDIT-ID"
	if a.Node == "" {
		head += "\tNODE"
	}
	fmt.Fprintln(tw, head+"\tCOMMAND")
	for i := range a.Items {
		s := &a.Items[i]
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s", rfc3339(s.RequestReceivedTimestamp), effectiveUser(&s.ExecRecord),
			orDash(s.Container), s.ProcessCount, s.Code, s.AuditID)
		if a.Node == "" {
			fmt.Fprintf(tw, "\t%s", nodes(s.Nodes))
		}
		fmt.Fprintf(tw, "\t%s\n", short(strings.Join(s.Command, " "), 60))
		if wide {
			writeProcessLines(tw, s.Processes)
		}
	}
	return flushSessions(tw, a.Truncated)
}

func renderClusterSession(w io.Writer, a cluster.Answer[cluster.SessionView]) error {
	if len(a.Items) > 1 {
		fmt.Fprintf(w, "Audit ID %s is held by %d different requests (replayed, or reused across nodes):\n\n",
			a.Items[0].AuditID, len(a.Items))
	}
	for i := range a.Items {
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "Node:        %s\n", nodes(a.Items[i].Nodes))
		if err := renderSession(w, a.Items[i].SessionView); err != nil {
			return err
		}
	}
	return nil
}

func renderAlerts(w io.Writer, a cluster.Answer[cluster.Alert]) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\tSEVERITY\tRULE\tAUDIT-ID\tNODE\tMESSAGE")
	for i := range a.Items {
		x := &a.Items[i]
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", rfc3339(x.Time), orDash(x.Severity), x.Rule, orDash(x.AuditID),
			nodes(x.Nodes), short(x.Message, 80))
	}
	if a.Truncated {
		fmt.Fprintln(tw, "(more alerts: raise --limit or narrow with --since)")
	}
	return tw.Flush()
}

func renderWhoIn(w io.Writer, a cluster.WhoInAnswer, wide bool) error {
	where := "in any namespace"
	if a.Namespace != "" {
		where = "in namespace " + a.Namespace
	}
	fmt.Fprintf(w, "Pods %s matching %s: %d\n", where, a.Selector, len(a.Pods))
	if len(a.Items) == 0 {
		fmt.Fprintln(w, "No exec sessions recorded.")
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "STARTED\tUSER\tNAMESPACE/POD\tCONTAINER\tNODE\tPROCS\tCODE\tAUDIT-ID\tCOMMAND")
	for i := range a.Items {
		s := &a.Items[i]
		fmt.Fprintf(tw, "%s\t%s\t%s/%s\t%s\t%s\t%d\t%d\t%s\t%s\n", rfc3339(s.RequestReceivedTimestamp),
			effectiveUser(&s.ExecRecord), s.Namespace, s.Pod, orDash(s.Container), nodes(s.Nodes), s.ProcessCount, s.Code,
			s.AuditID, short(strings.Join(s.Command, " "), 60))
		if wide {
			writeProcessLines(tw, s.Processes)
		}
	}
	return flushSessions(tw, a.Truncated)
}

// writeProcessLines lists a session's processes under its row (-o wide).
// Lines without a tab are not cells: they leave the columns as they are.
func writeProcessLines(tw *tabwriter.Writer, ps []join.Process) {
	for j := range ps {
		p := &ps[j]
		fmt.Fprintf(tw, "    %s pid %d: %s (%s)\n", rfc3339(startOf(p)), p.PID, argv(p, 80), orDash(string(p.Attribution)))
	}
}

// flushSessions ends a session table, saying when there were more.
func flushSessions(tw *tabwriter.Writer, truncated bool) error {
	if truncated {
		fmt.Fprintln(tw, "(more sessions: raise --limit or narrow with --since)")
	}
	return tw.Flush()
}
