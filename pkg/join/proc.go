package join

import (
	"slices"
	"time"
)

// proc is one process held by the joiner.
type proc struct {
	in       Process
	images   [][]string // argv of every exec of this process, for scoring
	added    time.Time  // arrival, for the pending TTL
	seq      uint64
	exit     time.Time
	exitCode *int
	res      result
	expired  bool // the pending TTL ran out
	rootPod  string
	size     int // estimated heap, for MaxProcessBytes
	// parent is the parent as last seen, so a child keeps what it inherited
	// after the parent leaves memory.
	parent *parentView
}

type parentView struct {
	res         result
	containerID string
}

// result is what resolve decides for a process.
type result struct {
	attr       Attribution
	auditID    string
	confidence float64
	candidates []string
	flags      []string // join flags only; capture flags are added on output
	waiting    bool     // a record yet to come could change the answer
	execRoot   bool     // an ID-less exec root, open to late records
}

func (r *result) equal(o *result) bool {
	return r.attr == o.attr && r.auditID == o.auditID && r.confidence == o.confidence &&
		r.waiting == o.waiting && r.execRoot == o.execRoot && slices.Equal(r.candidates, o.candidates) && slices.Equal(r.flags, o.flags)
}

// counted reports whether the result adds the process to its session.
func (r *result) counted() bool {
	switch r.attr {
	case AttributionAuditID, AttributionInherited, AttributionHeuristic:
		return true
	}
	return false
}

func (r *result) flag(f string) {
	if !slices.Contains(r.flags, f) {
		r.flags = append(r.flags, f)
		slices.Sort(r.flags)
	}
}

func cloneProcess(in Process) Process {
	in.Argv = slices.Clone(in.Argv)
	in.Flags = slices.Clone(in.Flags)
	in.SPO.Flags = slices.Clone(in.SPO.Flags)
	return in
}

func (p *proc) addImage(in Process) {
	argv := stripSPOPrefix(in.Argv)
	for _, im := range p.images {
		if slices.Equal(im, argv) {
			return
		}
	}
	p.images = append(p.images, slices.Clone(argv))
}

// merge folds a re-exec of the same process in. The later exec's image and
// IDs win; ties keep what is held so the result is order-independent.
func (p *proc) merge(in Process) {
	p.addImage(in)
	start := p.in.Start
	if start.IsZero() || (!in.Start.IsZero() && in.Start.Before(start)) {
		start = in.Start
	}
	// A session root that execs in place (`sh -c '...; cmd'` runs cmd in
	// the root's own process) is still the root: the kernel found the ID
	// in the environment the runtime gave this very process, and its later
	// image reads the same ID back from the process's own lineage.
	root := sameRootID(&p.in, &in) || sameRootID(&in, &p.in)
	if in.ExecTime.After(p.in.ExecTime) ||
		(in.ExecTime.Equal(p.in.ExecTime) && lessProcess(&in, &p.in)) {
		p.in = cloneProcess(in)
	}
	if root {
		p.in.Source = SourceEnv
	}
	p.in.Start = start
	// Every image is a candidate argv; keep them ordered for determinism.
	slices.SortFunc(p.images, slices.Compare)
}

// sameRootID reports whether a was its process's session root (the ID from
// the environment, no root flag against it) and b carries the same ID.
func sameRootID(a, b *Process) bool {
	return a.Source == SourceEnv && a.AuditID != "" && a.AuditID == b.AuditID &&
		!slices.Contains(a.Flags, FlagRootUnverified) && !slices.Contains(a.Flags, FlagRootIndirect)
}

// lessProcess orders two execs with the same time by their content, so the
// kept one does not depend on arrival order.
func lessProcess(a, b *Process) bool {
	if c := slices.Compare(a.Argv, b.Argv); c != 0 {
		return c < 0
	}
	return a.AuditID+a.SPO.Value < b.AuditID+b.SPO.Value
}

// setExit records an exit once; it reports whether anything changed.
func (p *proc) setExit(e Exit) bool {
	if !p.exit.IsZero() {
		return false
	}
	p.exit = e.Time
	code := e.Code
	p.exitCode = &code
	return true
}

func (p *proc) exited() bool { return !p.exit.IsZero() }

// startTime is the best known start of the process.
func (p *proc) startTime() time.Time {
	if !p.in.Start.IsZero() {
		return p.in.Start
	}
	return p.in.ExecTime
}

// captureFlags returns the capture flags of both keys, sorted and unique.
func (p *proc) captureFlags() []string {
	fl := slices.Concat(p.in.Flags, p.in.SPO.Flags)
	slices.Sort(fl)
	return slices.Compact(fl)
}

// output renders the process with its attribution; it shares no memory with
// the joiner.
func (p *proc) output() AttributedProcess {
	in := &p.in
	flags := slices.Concat(p.captureFlags(), p.res.flags)
	slices.Sort(flags)
	flags = slices.Compact(flags)
	if flags == nil {
		flags = []string{}
	}
	ap := AttributedProcess{
		ProcessID: in.ProcessID, ParentProcessID: in.ParentProcessID,
		PID: in.PID, PPID: in.PPID, UID: in.UID,
		Start: in.Start, ExecTime: in.ExecTime,
		Filename: in.Filename, Argv: slices.Clone(in.Argv), ArgvTruncated: in.ArgvTruncated,
		ContainerID: in.ContainerID, PodUID: in.PodUID,
		Namespace: in.Namespace, Pod: in.Pod, Container: in.Container,
		CapturedAuditID: in.AuditID, ClaimedAuditID: in.ClaimedAuditID,
		SPOExecRequestUID: in.SPO.Value, Source: in.Source, SessionRootID: in.SessionRootID,
		Attribution: p.res.attr, AuditID: p.res.auditID, Confidence: p.res.confidence,
		Candidates: slices.Clone(p.res.candidates), Flags: flags,
		Exit: p.exit,
	}
	if p.exitCode != nil {
		c := *p.exitCode
		ap.ExitCode = &c
	}
	return ap
}

// hasFlag reports whether the audit ID key carries capture flag f.
func (p *proc) hasFlag(f string) bool { return slices.Contains(p.in.Flags, f) }

// auditKey is the captured audit ID if it can name a session.
func (p *proc) auditKey() string {
	if p.in.AuditID == "" || p.in.AuditID == PlaceholderID {
		return ""
	}
	return p.in.AuditID
}

// podKey indexes records and exec roots by namespace and pod.
func podKey(namespace, pod string) string {
	if namespace == "" || pod == "" {
		return ""
	}
	return namespace + "/" + pod
}
