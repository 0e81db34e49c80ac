package render

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/execid/correlator/pkg/api"
	"github.com/execid/correlator/pkg/cluster"
	"github.com/execid/correlator/pkg/join"
)

// Every session list, the node's page and the cluster's answers, is one
// table writer over named columns; each answer picks its columns.

// moreSessions ends a cluster answer cut at --limit.
const moreSessions = "(more sessions: raise --limit or narrow with --since)"

// sessionCell is the cell of column col in s's row.
func sessionCell(col string, s *cluster.Session) string {
	switch col {
	case "AUDIT-ID":
		return s.AuditID
	case "USER":
		return effectiveUser(&s.ExecRecord)
	case "NAMESPACE/POD":
		return s.Namespace + "/" + s.Pod
	case "CONTAINER":
		return orDash(s.Container)
	case "STARTED":
		return rfc3339(s.RequestReceivedTimestamp)
	case "NODE":
		return nodes(s.Nodes)
	case "PROCS":
		return strconv.Itoa(s.ProcessCount)
	case "CODE":
		return strconv.Itoa(int(s.Code))
	case "FLAGS":
		return flags(s.Flags)
	case "SOURCE-IPS":
		return orDash(strings.Join(s.SourceIPs, ","))
	case "COMMAND":
		return command(s.Command)
	}
	panic("render: no session column " + col)
}

// writeSessions writes items as rows of cols; with processes, each
// session's processes under its row (-o wide). A non-empty more ends the
// table, then when to ask again if a process listed is pending.
func writeSessions(w io.Writer, cols []string, items []cluster.Session, processes bool, more string) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(cols, "\t"))
	cells := make([]string, len(cols))
	var wt waits
	for i := range items {
		for j, c := range cols {
			cells[j] = sessionCell(c, &items[i])
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
		if processes {
			writeProcessLines(tw, items[i].Processes)
			wt.add(items[i].Processes)
		}
	}
	if more != "" {
		fmt.Fprintln(tw, more)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	wt.write(w)
	return nil
}

// writeProcessLines lists a session's processes under its row (-o wide).
// Lines without a tab are not cells: they leave the columns as they are.
func writeProcessLines(w io.Writer, ps []join.Process) {
	for j := range ps {
		p := &ps[j]
		fmt.Fprintf(w, "    %s pid %d: %s (%s)\n", rfc3339(startOf(p)), p.PID, argv(p, 80), attributionLine(p))
	}
}

// SessionPage is one node's page of sessions (correlator sessions).
func (p *Printer) SessionPage(pg api.SessionPage) error {
	if done, err := p.encode(pg); done {
		return err
	}
	cols := []string{"AUDIT-ID", "USER", "NAMESPACE/POD", "CONTAINER", "STARTED", "PROCS", "CODE", "FLAGS"}
	if p.wide() {
		cols = append(cols, "SOURCE-IPS")
	}
	rows := make([]cluster.Session, len(pg.Items))
	for i := range pg.Items {
		rows[i].Session = pg.Items[i]
	}
	more := ""
	if pg.NextCursor != "" {
		more = "(more: --all, or the cursor " + pg.NextCursor + ")"
	}
	return writeSessions(p.w, append(cols, "COMMAND"), rows, false, more)
}

// Sessions is the cluster's sessions, merged (kubectl correlator
// sessions); wide adds each session's code, flags and source IPs.
func (p *Printer) Sessions(a cluster.Answer[cluster.Session]) error {
	if done, err := p.encode(a); done {
		return err
	}
	cols := []string{"STARTED", "USER", "NAMESPACE/POD", "CONTAINER", "NODE", "PROCS", "AUDIT-ID"}
	if p.wide() {
		cols = append(cols, "CODE", "FLAGS", "SOURCE-IPS")
	}
	return writeSessions(p.w, append(cols, "COMMAND"), a.Items, false, truncated(a.Truncated))
}

// Who is who exec'd into one pod; wide lists each session's processes.
func (p *Printer) Who(a cluster.WhoAnswer) error {
	if done, err := p.encode(a); done {
		return err
	}
	if a.Node != "" {
		fmt.Fprintf(p.w, "Pod %s/%s on node %s\n", a.Namespace, a.Pod, a.Node)
	} else {
		fmt.Fprintf(p.w, "Pod %s/%s is not running on a node: asked every node\n", a.Namespace, a.Pod)
	}
	// A pending process with no session listed here (an exec root whose
	// record has not come) is the answer not known yet, not nobody's.
	var w waits
	w.add(outside(a.Pending, a.Items))
	if len(a.Items) == 0 {
		if w.n == 0 {
			_, err := fmt.Fprintln(p.w, "No exec sessions recorded.")
			return err
		}
		fmt.Fprintln(p.w, "No exec sessions recorded yet.")
	} else {
		cols := []string{"STARTED", "USER", "CONTAINER", "PROCS", "CODE", "AUDIT-ID"}
		if a.Node == "" {
			cols = append(cols, "NODE")
		}
		if err := writeSessions(p.w, append(cols, "COMMAND"), a.Items, p.wide(), truncated(a.Truncated)); err != nil {
			return err
		}
	}
	if w.n > 0 {
		_, err := fmt.Fprintf(p.w, "(%d %s in the pod with no session yet: who ran %s is not known until %s at the latest, "+
			"when their audit records are in; ask again after then)\n",
			w.n, plural(w.n, "process", "processes"), plural(w.n, "it", "them"), rfc3339(w.last))
		return err
	}
	return nil
}

// outside keeps the processes of ps no session of items names.
func outside(ps []join.Process, items []cluster.Session) []join.Process {
	var out []join.Process
	for _, p := range ps {
		if !slices.ContainsFunc(items, func(s cluster.Session) bool { return p.AuditID != "" && s.AuditID == p.AuditID }) {
			out = append(out, p)
		}
	}
	return out
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// WhoIn is who exec'd into the pods a label selector picked; wide lists
// each session's processes.
func (p *Printer) WhoIn(a cluster.WhoInAnswer) error {
	if done, err := p.encode(a); done {
		return err
	}
	where := "in any namespace"
	if a.Namespace != "" {
		where = "in namespace " + a.Namespace
	}
	fmt.Fprintf(p.w, "Pods %s matching %s: %d\n", where, a.Selector, len(a.Pods))
	if len(a.Items) == 0 {
		_, err := fmt.Fprintln(p.w, "No exec sessions recorded.")
		return err
	}
	cols := []string{"STARTED", "USER", "NAMESPACE/POD", "CONTAINER", "NODE", "PROCS", "CODE", "AUDIT-ID", "COMMAND"}
	return writeSessions(p.w, cols, a.Items, p.wide(), truncated(a.Truncated))
}

func truncated(t bool) string {
	if t {
		return moreSessions
	}
	return ""
}
