package join

import (
	"cmp"
	"slices"
	"time"

	"github.com/execid/correlator/pkg/capture"
	"github.com/execid/correlator/pkg/vocab"
)

// proc is one process held by the joiner.
type proc struct {
	in      Process
	images  [][]string // argv of every exec of this process, for scoring
	added   time.Time  // arrival, for the pending TTL
	seq     uint64
	res     result
	expired bool // the pending TTL ran out
	rootPod string
	size    int // estimated heap, for MaxProcessBytes
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
	attr       vocab.Attribution
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
func (r *result) counted() bool { return r.attr.Counted() }

func (r *result) flag(f string) {
	if !slices.Contains(r.flags, f) {
		r.flags = append(r.flags, f)
		slices.Sort(r.flags)
	}
}

func cloneProcess(in Process) Process {
	in.Argv = slices.Clone(in.Argv)
	in.Captured.Flags = slices.Clone(in.Captured.Flags)
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
		p.in.Captured.Source = vocab.SourceEnv
	}
	p.in.Start = start
	// Every image is a candidate argv; keep them ordered for determinism.
	slices.SortFunc(p.images, slices.Compare)
}

// sameRootID reports whether a was its process's session root (the ID from
// the environment, no root flag against it) and b carries the same ID.
func sameRootID(a, b *Process) bool {
	c := &a.Captured
	return c.Source == vocab.SourceEnv && c.Value != "" && c.Value == b.Captured.Value &&
		!slices.Contains(c.Flags, vocab.FlagRootUnverified) && !slices.Contains(c.Flags, vocab.FlagRootIndirect)
}

// lessProcess orders two execs with the same time by their content, so the
// kept one does not depend on arrival order.
func lessProcess(a, b *Process) bool {
	if c := slices.Compare(a.Argv, b.Argv); c != 0 {
		return c < 0
	}
	return a.Captured.Value+a.SPO.Value < b.Captured.Value+b.SPO.Value
}

// setExit records an exit once; it reports whether anything changed.
func (p *proc) setExit(e Exit) bool {
	if !p.in.Exit.IsZero() {
		return false
	}
	code := e.Code
	p.in.Exit, p.in.ExitCode = e.Time, &code
	return true
}

func (p *proc) exited() bool { return !p.in.Exit.IsZero() }

// startTime is the best known start of the process.
func (p *proc) startTime() time.Time {
	if !p.in.Start.IsZero() {
		return p.in.Start
	}
	return p.in.ExecTime
}

// captureFlags returns the capture flags of both keys, sorted and unique.
func (p *proc) captureFlags() []string {
	fl := slices.Concat(p.in.Captured.Flags, p.in.SPO.Flags)
	slices.Sort(fl)
	return slices.Compact(fl)
}

// output renders the process with its attribution; it shares no memory with
// the joiner. The claim rule lives here: a process that is not attributed
// only claims the ID it carried (ClaimedAuditID) and names no session
// (AuditID), which would put a forged root's commands under the victim's
// user.
func (p *proc) output() Process {
	out := p.in
	out.Argv = slices.Clone(p.in.Argv)
	out.Captured, out.SPO = capture.KeyValue{}, capture.KeyValue{}
	out.Source, out.SPOExecRequestUID = p.in.Captured.Source, p.in.SPO.Value
	out.Attribution, out.AuditID, out.Confidence = p.res.attr, p.res.auditID, p.res.confidence
	out.Candidates = slices.Clone(p.res.candidates)
	out.ClaimedAuditID = p.in.Captured.Claimed
	if out.Attribution == vocab.AttributionNone {
		if claim := cmp.Or(p.in.Captured.Value, p.res.auditID); claim != "" {
			out.ClaimedAuditID = claim
		}
		out.AuditID = ""
	}
	out.Flags = slices.Concat(p.captureFlags(), p.res.flags)
	slices.Sort(out.Flags)
	out.Flags = slices.Compact(out.Flags)
	if out.Flags == nil {
		out.Flags = []string{}
	}
	if p.in.ExitCode != nil {
		c := *p.in.ExitCode
		out.ExitCode = &c
	}
	return out
}

// hasFlag reports whether the audit ID key carries capture flag f.
func (p *proc) hasFlag(f string) bool { return slices.Contains(p.in.Captured.Flags, f) }

// auditKey is the captured audit ID if it can name a session.
func (p *proc) auditKey() string {
	if id := p.in.Captured.Value; id != vocab.PlaceholderID {
		return id
	}
	return ""
}

// podKey indexes records and exec roots by namespace and pod.
func podKey(namespace, pod string) string {
	if namespace == "" || pod == "" {
		return ""
	}
	return namespace + "/" + pod
}
