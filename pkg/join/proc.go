package join

import (
	"cmp"
	"math"
	"slices"
	"time"

	"github.com/execid/correlator/pkg/capture"
	"github.com/execid/correlator/pkg/vocab"
)

// proc is one process held by the joiner. A node may hold hundreds of
// thousands: what only some processes need is in rare.
type proc struct {
	in   procInfo
	seq  uint64
	exit *exitInfo     // nil while running
	res  *sharedResult // never nil; never written to
	rare *procRare     // nil until a re-exec or a heuristic hold needs it
	// parent is the parent as last seen (res nil: never seen), so a child
	// keeps what it inherited after the parent leaves memory.
	parent  parentView
	size    int32 // estimated heap, for MaxProcessBytes
	expired bool  // the pending TTL ran out
	rootPod bool  // indexed in rootsPod under podKey(in.Namespace, in.Pod)
	// uncovered: flagged uncovered_exec once, and counted then.
	uncovered bool
	// awaiting: p is in windowq, to be resolved when its window closes.
	awaiting bool
	// answeredSeen: p was answered by its own record at its exit or at its
	// last look in doneq, so it has been for an AnsweredLinger (late.go).
	answeredSeen bool
}

// procRare is what few processes hold.
type procRare struct {
	// exec is ExecTime when execSet; otherwise ExecTime is in.Start, as it
	// is but for a re-exec.
	exec    time.Time
	execSet bool
	// first is the argv of the process's first exec, the one the runtime
	// made for an exec root, once a later exec replaced in.Argv; until then
	// it is nil and in.Argv is the first. The heuristic scores it.
	first   []string
	firstAt time.Time
	// firstOrigin is who exec'd the first image (with first).
	firstOrigin capture.Origin
	// held is the pod and session key that is this settled ID-less root's
	// only heuristic candidate: no other ID-less root of the pod may have it.
	held string
	// lateAt is when a record answered p after its wait had ended (late.go).
	lateAt time.Time
}

// rareFields returns p.rare, made on first use.
func (p *proc) rareFields() *procRare {
	if p.rare == nil {
		p.rare = &procRare{}
	}
	return p.rare
}

// first is p.rare.first, nil without one.
func (p *proc) first() []string {
	if p.rare == nil {
		return nil
	}
	return p.rare.first
}

// held is p.rare.held, "" without one.
func (p *proc) held() string {
	if p.rare == nil {
		return ""
	}
	return p.rare.held
}

type exitInfo struct {
	time time.Time
	code int
}

// procInfo is the joiner's copy of a Process's inputs, with the same field
// names. What a container's or a session's processes all repeat (pod
// identity, the audit ID key's evidence, the SPO key) is in one shared
// procShared, the image in one procImage: a held process costs a fraction
// of a Process.
type procInfo struct {
	ProcessID       string
	ParentProcessID string    // the parent's own ProcessID string when it is held
	Start           time.Time // ExecTime too, unless rare says otherwise
	PID, PPID, UID  uint32
	*procImage      // never nil; never written to
	*procShared     // never nil; never written to
}

// execTime is when p's image was exec'd.
func (p *proc) execTime() time.Time {
	if p.rare != nil && p.rare.execSet {
		return p.rare.exec
	}
	return p.in.Start
}

// setExec records t as p's ExecTime, in rare only when it is not Start.
func (p *proc) setExec(t time.Time) {
	if t == p.in.Start {
		if p.rare != nil {
			p.rare.exec, p.rare.execSet = time.Time{}, false
		}
		return
	}
	r := p.rareFields()
	r.exec, r.execSet = t, true
}

// setStart moves Start, keeping ExecTime.
func (p *proc) setStart(t time.Time) {
	e := p.execTime()
	p.in.Start = t
	p.setExec(e)
}

// parentView holds a reference to the parent's shared result (released
// with the child: see Joiner.setParent).
type parentView struct {
	res *sharedResult
	sh  *procShared // the parent's: its container ID (counted in j.shares)
}

func (v *parentView) containerID() string { return v.sh.ContainerID }

// result is what resolve decides for a process.
type result struct {
	attr       vocab.Attribution
	auditID    string
	confidence float64
	candidates []string
	flags      []string // join flags only; capture flags are added on output
	waiting    bool     // a record yet to come could change the answer
	execRoot   bool     // an ID-less exec root, open to late records
	windowed   bool     // waiting for the heuristic window's bound, not the TTL (pendingUntil)
}

func (r *result) equal(o *result) bool {
	return r.attr == o.attr && r.auditID == o.auditID && r.confidence == o.confidence &&
		r.waiting == o.waiting && r.execRoot == o.execRoot && r.windowed == o.windowed &&
		slices.Equal(r.candidates, o.candidates) && slices.Equal(r.flags, o.flags)
}

// counted reports whether the result adds the process to its session.
func (r *result) counted() bool { return r.attr.Counted() }

func (r *result) flag(f string) {
	if !slices.Contains(r.flags, f) {
		r.flags = append(r.flags, f)
		slices.Sort(r.flags)
	}
}

// own makes p's copy of in: the image and the repeated fields are shared
// (j.images, j.shares), so nothing aliases the caller's slices.
func (j *Joiner) own(p *proc, in *Process) {
	p.in = procInfo{
		ProcessID: in.ProcessID, ParentProcessID: j.sameID(in.ParentProcessID),
		Start: in.Start, PID: in.PID, PPID: in.PPID, UID: in.UID,
		procImage: j.images.acquire(in),
		procShared: j.shares.acquire(&sharedFields{ContainerID: in.ContainerID, PodUID: in.PodUID,
			Namespace: in.Namespace, Pod: in.Pod, Container: in.Container, SessionRootID: in.SessionRootID,
			Captured: in.Captured, SPO: in.SPO, Bridge: in.Bridge}),
	}
	p.setExec(in.ExecTime)
}

// sameID returns id as the held process of that ID spells it, so that a
// hundred children name their parent with one string, not a hundred.
func (j *Joiner) sameID(id string) string {
	if p := j.procs.get(id); p != nil {
		return p.in.ProcessID
	}
	return id
}

// disown undoes own: in's shared values lose a user.
func (j *Joiner) disown(in *procInfo) {
	j.images.release(in.procImage)
	j.shares.release(in.procShared)
}

// firstImage returns the argv of p's first exec, without an env prefix.
func (p *proc) firstImage() []string {
	if first := p.first(); first != nil {
		return first
	}
	return stripEnvPrefix(p.in.Argv)
}

// origin is who exec'd p's first image.
func (p *proc) origin() capture.Origin {
	if p.first() != nil {
		return p.rare.firstOrigin
	}
	return p.in.ExecOrigin
}

// runtimeExec reports whether the runtime exec'd p's first image from
// outside its container: an exec session's root, never an entrypoint.
func (p *proc) runtimeExec() bool { return p.origin().Verified() }

// firstFilename is the file p's first exec ran, where known.
func (p *proc) firstFilename() string {
	if p.first() != nil {
		return ""
	}
	return p.in.Filename
}

// noteFirst keeps the first exec's argv as in and p's images merge.
func (p *proc) noteFirst(in *Process) {
	r := p.rareFields()
	if r.first == nil {
		r.first, r.firstAt, r.firstOrigin = slices.Clone(stripEnvPrefix(p.in.Argv)), p.execTime(), p.in.ExecOrigin
	}
	if in.ExecTime.Before(r.firstAt) || (in.ExecTime.Equal(r.firstAt) && slices.Compare(stripEnvPrefix(in.Argv), r.first) < 0) {
		r.first, r.firstAt, r.firstOrigin = slices.Clone(stripEnvPrefix(in.Argv)), in.ExecTime, in.ExecOrigin
	}
}

// merge folds a re-exec of the same process in. The later exec's image and
// IDs win; ties keep what is held so the result is order-independent.
func (j *Joiner) merge(p *proc, in *Process) {
	p.noteFirst(in)
	start := p.in.Start
	if start.IsZero() || (!in.Start.IsZero() && in.Start.Before(start)) {
		start = in.Start
	}
	// A session root that execs in place (`sh -c '...; cmd'` runs cmd in
	// the root's own process) is still the root: the kernel found the ID
	// in the environment the runtime gave this very process, and its later
	// image reads the same ID back from the process's own lineage.
	root := sameRootID(&p.in.Captured, &in.Captured) || sameRootID(&in.Captured, &p.in.Captured)
	// Likewise the bridge's env, which execs the user's command in place,
	// and a debug container's init that does (its env is the runtime's).
	// noteFirst has run: p.origin() is the first image's, held or not.
	broot := sameRootID(&p.in.Bridge, &in.Bridge) || sameRootID(&in.Bridge, &p.in.Bridge) ||
		(p.origin() == capture.OriginContainerInit && (sameInitID(&p.in.Bridge, &in.Bridge) || sameInitID(&in.Bridge, &p.in.Bridge)))
	if held := p.execTime(); in.ExecTime.After(held) || (in.ExecTime.Equal(held) && lessExec(in, &p.in)) {
		next := *in
		if root {
			next.Captured.Source = vocab.SourceEnv
		}
		if broot {
			next.Bridge.Source = vocab.SourceEnv
		}
		next.Start = start
		old := p.in
		j.own(p, &next)
		j.disown(&old)
		return
	}
	p.setStart(start)
	if (root && p.in.Captured.Source != vocab.SourceEnv) || (broot && p.in.Bridge.Source != vocab.SourceEnv) {
		f := p.in.sharedFields
		if root {
			f.Captured.Source = vocab.SourceEnv
		}
		if broot {
			f.Bridge.Source = vocab.SourceEnv
		}
		old := p.in.procShared
		p.in.procShared = j.shares.acquire(&f)
		j.shares.release(old)
	}
}

// sameRootID reports whether a was its process's session root (the ID from
// the environment, no root flag against it) and b carries the same ID.
func sameRootID(a, b *capture.KeyValue) bool {
	return a.Source == vocab.SourceEnv && a.Value != "" && a.Value == b.Value &&
		!slices.Contains(a.Flags, vocab.FlagRootUnverified) && !slices.Contains(a.Flags, vocab.FlagRootIndirect)
}

// sameInitID reports whether a, an image of a process whose first image
// the runtime started as a container's init (the kernel's container_init:
// ephemeralInit's evidence), read the bridge's ID from its env, never an
// exec's bridge argv, and b carries the same ID. Its flags stay: the
// pairing, not the kernel, vouches for such a root.
func sameInitID(a, b *capture.KeyValue) bool {
	return a.Source == vocab.SourceEnv && a.Value != "" && a.Value == b.Value && !slices.Contains(a.Flags, vocab.FlagBridgeArgv)
}

// lessExec orders an exec against the held one with the same time by their
// content, so the kept one does not depend on arrival order.
func lessExec(in *Process, held *procInfo) bool {
	if c := slices.Compare(in.Argv, held.Argv); c != 0 {
		return c < 0
	}
	return in.Captured.Value+in.SPO.Value+in.Bridge.Value < held.Captured.Value+held.SPO.Value+held.Bridge.Value
}

// setExit records an exit once; it reports whether anything changed.
func (p *proc) setExit(e Exit) bool {
	if p.exited() {
		return false
	}
	p.exit = &exitInfo{time: e.Time, code: e.Code}
	return true
}

func (p *proc) exited() bool { return p.exit != nil && !p.exit.time.IsZero() }

// startTime is the best known start of the process.
func (p *proc) startTime() time.Time {
	if !p.in.Start.IsZero() {
		return p.in.Start
	}
	return p.execTime()
}

// captureFlags returns the capture flags of both keys, sorted and unique.
func (p *proc) captureFlags() []string {
	fl := slices.Concat(p.in.Captured.Flags, p.in.SPO.Flags, p.in.Bridge.Flags)
	slices.Sort(fl)
	return slices.Compact(fl)
}

// output renders the process with its attribution; it shares no memory with
// the joiner. The claim rule lives here: a process that is not attributed
// only claims the ID it carried (ClaimedAuditID) and names no session
// (AuditID), which would put a forged root's commands under the victim's
// user.
func (j *Joiner) output(p *proc) Process {
	in := &p.in
	out := Process{
		Exec: capture.Exec{ProcessID: in.ProcessID, ParentProcessID: in.ParentProcessID,
			PID: in.PID, PPID: in.PPID, UID: in.UID, Filename: in.Filename, Argv: slices.Clone(in.Argv),
			ArgvTruncated: in.ArgvTruncated, ContainerID: in.ContainerID, PodUID: in.PodUID,
			SessionRootID: in.SessionRootID},
		Namespace: in.Namespace, Pod: in.Pod, Container: in.Container, Start: in.Start, ExecTime: p.execTime(),
		Source: in.Captured.Source, SPOExecRequestUID: in.SPO.Value,
		Attribution: p.res.attr, AuditID: p.res.auditID, Confidence: p.res.confidence,
		Candidates: slices.Clone(p.res.candidates), ClaimedAuditID: in.Captured.Claimed,
		Pending: p.res.waiting && !p.expired,
		// The evidence as taken in, for the stores: a record later than
		// the process's stay in memory meets it again (RestoreProcesses).
		Captured: cloneKV(in.Captured), SPO: cloneKV(in.SPO), Bridge: cloneKV(in.Bridge), ExecOrigin: p.origin(),
	}
	if !out.Attribution.Counted() {
		// Neither an unattributed nor an ambiguous process is any one
		// user's: no user filter may return it through a session.
		if claim := cmp.Or(in.Captured.Value, p.res.auditID); claim != "" {
			out.ClaimedAuditID = claim
		}
		out.AuditID = ""
	}
	out.Flags = slices.Concat(p.captureFlags(), p.res.flags)
	if at := p.lateAt(); !at.IsZero() {
		out.Flags = append(out.Flags, vocab.FlagLateAuditRecord)
		out.RecordDelay = math.Round(at.Sub(p.startTime()).Seconds()*1000) / 1000
	}
	slices.Sort(out.Flags)
	out.Flags = slices.Compact(out.Flags)
	if out.Flags == nil {
		out.Flags = []string{}
	}
	if p.exit != nil {
		c := p.exit.code
		out.Exit, out.ExitCode = p.exit.time, &c
	}
	if out.Pending {
		out.PendingUntil = j.pendingUntil(p)
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

// bridgeKey is the exec bridge's ID for p, prefixed (bridgePrefix), when p
// carries no audit ID: the audit ID key, once KEP-6035 injects it, wins.
func (p *proc) bridgeKey() string {
	if v := p.in.Bridge.Value; v != "" && p.auditKey() == "" {
		return bridgePrefix + v
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
