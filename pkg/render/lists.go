package render

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/execid/correlator/pkg/api"
	"github.com/execid/correlator/pkg/cluster"
	"github.com/execid/correlator/pkg/join"
)

// processCell is the cell of column col in x's row.
func processCell(col string, x *join.Process) string {
	switch col {
	case "STARTED":
		return rfc3339(startOf(x))
	case "PID":
		return strconv.Itoa(int(x.PID))
	case "NAMESPACE/POD":
		return orDash(x.Namespace) + "/" + orDash(x.Pod)
	case "CONTAINER":
		return orDash(x.Container)
	case "AUDIT-ID":
		return orDash(x.AuditID)
	case "ATTRIBUTION":
		return attribution(x)
	case "SOURCE":
		return orDash(string(x.Source))
	case "EXIT":
		if x.ExitCode == nil {
			return "-"
		}
		return strconv.Itoa(*x.ExitCode)
	case "FLAGS":
		return flags(x.Flags)
	case "ARGV":
		return argv(x, 70)
	}
	panic("render: no process column " + col)
}

// ProcessPage is one node's page of processes (correlator processes);
// wide adds each process's container, the source of its ID and its exit
// code. A page that holds pending processes ends with when to ask again.
func (p *Printer) ProcessPage(pg api.ProcessPage) error {
	if done, err := p.encode(pg); done {
		return err
	}
	cols := []string{"STARTED", "PID", "NAMESPACE/POD", "AUDIT-ID", "ATTRIBUTION", "FLAGS"}
	if p.wide() {
		cols = append(cols, "CONTAINER", "SOURCE", "EXIT")
	}
	cols = append(cols, "ARGV")
	tw := tabwriter.NewWriter(p.w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(cols, "\t"))
	cells := make([]string, len(cols))
	for i := range pg.Items {
		for j, c := range cols {
			cells[j] = processCell(c, &pg.Items[i])
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	if pg.NextCursor != "" {
		fmt.Fprintf(tw, "(more: --all, or the cursor %s)\n", pg.NextCursor)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	var w waits
	w.add(pg.Items)
	w.write(p.w)
	return nil
}

// Alerts is the alerts the agents raised, merged (kubectl correlator
// alerts); wide adds the pod each is about.
func (p *Printer) Alerts(a cluster.Answer[cluster.Alert]) error {
	if done, err := p.encode(a); done {
		return err
	}
	tw := tabwriter.NewWriter(p.w, 0, 4, 2, ' ', 0)
	head := "TIME\tSEVERITY\tRULE\tAUDIT-ID\tNODE"
	if p.wide() {
		head += "\tNAMESPACE/POD"
	}
	fmt.Fprintln(tw, head+"\tMESSAGE")
	for i := range a.Items {
		x := &a.Items[i]
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s", rfc3339(x.Time), orDash(x.Severity), x.Rule, orDash(x.AuditID), nodes(x.Nodes))
		if p.wide() {
			ns, pod := cluster.AlertPod(&x.Alert)
			fmt.Fprintf(tw, "\t%s/%s", orDash(ns), orDash(pod))
		}
		fmt.Fprintf(tw, "\t%s\n", short(x.Message, 80))
	}
	if a.Truncated {
		fmt.Fprintln(tw, "(more alerts: raise --limit or narrow with --since)")
	}
	return tw.Flush()
}

// Unanswered names, on w (stderr), the nodes that did not answer when err
// is a cluster.Incomplete; it writes nothing otherwise.
func Unanswered(w io.Writer, err error) {
	var inc *cluster.Incomplete
	if !errors.As(err, &inc) {
		return
	}
	what := "partial answer"
	if inc.None() {
		what = "no answer"
	}
	fmt.Fprintf(w, "%s: %d of %d nodes did not answer:\n", what, len(inc.Unreachable), inc.Nodes)
	for _, f := range inc.Unreachable {
		fmt.Fprintf(w, "  %s: %s\n", f.Node, f.Error)
	}
}
