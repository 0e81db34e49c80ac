package join

import (
	"slices"
	"strings"

	"github.com/execid/correlator/pkg/auditlog"
	"github.com/execid/correlator/pkg/vocab"
)

// resolve decides a process's attribution from what is held now. It reads
// the process, its parent (or session root) and the records, never the order
// they came in, which is what makes the join order-independent.
func (j *Joiner) resolve(p *proc) result {
	var r result
	if id := p.auditKey(); id != "" {
		if rs := j.recs[id]; rs != nil && rs.idless() {
			// A synthetic key is no audit ID: a process carrying one
			// copied it from somewhere, so it names no record.
			r.auditID = id
			j.unmatched(p, &r)
			return r
		}
		j.resolveID(p, id, p.in.Captured.Source, p.hasFlag(vocab.FlagRootUnverified), true, &r)
		return r
	}
	if v := p.bridgeKey(); v != "" {
		switch ids := j.spo[v]; len(ids) {
		case 0:
			// The annotated record is still to come.
			j.unmatched(p, &r)
		case 1:
			// A debug container's init is the runtime's, its env the
			// spec the bridge wrote: the pairing vouches for it
			// (ephemeral roots fit only their pods/ephemeralcontainers
			// request, by container name).
			unverified := slices.Contains(p.in.Bridge.Flags, vocab.FlagRootUnverified) && !ephemeralInit(p)
			j.resolveID(p, ids[0], p.in.Bridge.Source, unverified, true, &r)
		default:
			// The bridge draws a fresh ID per request: two records
			// naming one are a forgery or a replay. Pick none.
			r.attr, r.candidates = vocab.AttributionAmbiguous, slices.Clone(ids)
			r.flag(vocab.FlagAuditIDConflict)
		}
		return r
	}
	if v := p.in.SPO.Value; v != "" {
		switch ids := j.spo[v]; len(ids) {
		case 0:
		case 1:
			// SPO sets its UID with an env prefix, so its roots are never
			// the runtime's own exec: the most the kernel can vouch for is
			// that the runtime's first program set it (root_indirect).
			indirect := slices.Contains(p.in.SPO.Flags, vocab.FlagRootIndirect)
			spoUnverified := slices.Contains(p.in.SPO.Flags, vocab.FlagRootUnverified) && !indirect
			j.resolveID(p, ids[0], p.in.SPO.Source, spoUnverified, false, &r)
			return r
		default:
			// Two records annotated with one request UID: say so, pick none.
			r.attr, r.candidates = vocab.AttributionAmbiguous, slices.Clone(ids)
			r.flag(vocab.FlagAuditIDConflict)
			return r
		}
	}
	j.fallback(p, &r)
	if r.attr == vocab.AttributionNone && p.in.SPO.Value != "" && r.auditID == "" {
		// An SPO UID no record annotates yet is an orphan ID like any other.
		r.waiting = true
		if p.expired {
			r.flag(vocab.FlagNoAuditRecord)
		}
	}
	return r
}

// resolveID attributes a process that carries session ID id. paired is
// true for the audit ID key, whose roots the runtime exec'd: one request
// holds one root (pairing.go). SPO's roots are its env prefix's children,
// which the pairing cannot vouch for.
func (j *Joiner) resolveID(p *proc, id string, source vocab.Source, unverified, paired bool, r *result) {
	r.auditID = id
	rs := j.recs[id]
	if rs == nil {
		j.unmatched(p, r)
		return
	}
	conflict := rs.conflict()
	if conflict {
		r.flag(vocab.FlagAuditIDConflict)
	}
	var match []*auditlog.ExecRecord
	for _, rec := range rs.recs {
		if j.podMatches(p, rec, id) {
			match = append(match, rec)
		}
	}
	if len(match) == 0 {
		r.flag(vocab.FlagPodMismatch)
		return
	}
	allowed := match[:0:0]
	for _, rec := range match {
		if outcome(rec) == "" {
			allowed = append(allowed, rec)
		}
	}
	if len(allowed) == 0 {
		r.flag(outcome(match[0]))
		return
	}
	// A root the kernel could not verify (its parent is inside the
	// container) may have copied the ID from anywhere: only a parent (or
	// session root) already attributed to the same session vouches for it,
	// which is what a lost lineage entry looks like.
	if unverified && !j.vouched(p, id) {
		return
	}
	if paired {
		j.resolvePaired(p, id, rs, allowed, r)
		return
	}
	switch {
	case conflict:
		r.attr, r.candidates = vocab.AttributionAmbiguous, keysOf(rs, allowed)
	case unverified, source != vocab.SourceEnv:
		r.attr = vocab.AttributionInherited
	default:
		r.attr = vocab.AttributionAuditID
	}
}

// resolvePaired attributes a process under audit ID id through its session
// root's pairing: the root holds one request, and its descendants follow.
func (j *Joiner) resolvePaired(p *proc, id string, rs *recSet, allowed []*auditlog.ExecRecord, r *result) {
	pr := j.pairingOf(id)
	root := isRoot(p)
	rid := p.in.SessionRootID
	if root {
		rid = p.in.ProcessID
	}
	if o, ok := pr.outcome(rid); ok {
		applyOutcome(p, pr, o, root, r)
		return
	}
	if root {
		// Past maxRootsPerID: never attributed.
		r.waiting = true
		r.flag(vocab.FlagAuditIDReused)
		return
	}
	// The session root is not known here (a lost lineage entry, a procfs
	// bootstrap, an agent restart): the kernel's parent link still holds.
	if par := j.parentOf(p); par != nil && par.containerID() == p.in.ContainerID && par.res.counted() &&
		par.res.attr != vocab.AttributionHeuristic && slices.Contains(pr.keys, par.res.auditID) {
		r.attr, r.auditID = vocab.AttributionInherited, par.res.auditID
		return
	}
	cands := keysOf(rs, slices.DeleteFunc(slices.Clone(allowed), func(rec *auditlog.ExecRecord) bool { return !pairable(rec) }))
	switch {
	case len(cands) == 0:
		j.unmatched(p, r)
	case len(cands) == 1 && pr.nroots() == 0:
		// One request and no root seen: nothing to tell it from.
		r.attr, r.auditID = vocab.AttributionInherited, cands[0]
	default:
		r.attr, r.candidates = vocab.AttributionAmbiguous, cands
	}
}

// applyOutcome turns a root's pairing into the result of the root (root)
// or of one of its descendants.
func applyOutcome(p *proc, pr *pairing, o rootOutcome, root bool, r *result) {
	switch {
	case o.req >= 0 && pr.unseen && !o.bound:
		// Another request under the ID is not held yet: it may be this
		// root's. A bridge root's own request is the one its ID names.
		r.attr, r.candidates = vocab.AttributionAmbiguous, []string{pr.keys[o.req]}
	case o.req >= 0:
		r.attr, r.auditID = vocab.AttributionInherited, pr.keys[o.req]
		if root {
			r.attr = vocab.AttributionAuditID
		}
	case len(o.cands) > 0:
		r.attr = vocab.AttributionAmbiguous
		for _, q := range o.cands {
			r.candidates = append(r.candidates, pr.keys[q])
		}
		if len(o.cands) == 1 {
			// Another root fits the one request as well: one of them
			// reused its ID.
			r.flag(vocab.FlagAuditIDReused)
		}
	default:
		r.waiting = true
		if o.reused {
			r.flag(vocab.FlagAuditIDReused)
		}
		if p.expired {
			r.flag(vocab.FlagNoAuditRecord)
		}
	}
}

// keysOf returns the session keys of the given requests of rs.
func keysOf(rs *recSet, recs []*auditlog.ExecRecord) []string {
	keys := rs.keys()
	var out []string
	for i, rec := range rs.recs {
		if slices.Contains(recs, rec) {
			out = append(out, keys[i])
		}
	}
	return out
}

// isRoot reports whether p is a session root the kernel verified: it found
// the ID in the environment the runtime gave this very process (or, for
// the exec bridge's ID, in the argv the runtime exec'd).
func isRoot(p *proc) bool {
	if p.auditKey() == "" && p.in.Bridge.Value != "" {
		return isBridgeRoot(p)
	}
	return p.in.Captured.Source == vocab.SourceEnv && !p.hasFlag(vocab.FlagRootUnverified)
}

// unmatched leaves a process carrying an ID no record answers waiting, and
// flags it once the pending TTL has passed.
func (j *Joiner) unmatched(p *proc, r *result) {
	r.waiting = true
	if p.expired {
		r.flag(vocab.FlagNoAuditRecord)
	}
}

// outcome names the flag a refused or failed request earns, or "".
func outcome(rec *auditlog.ExecRecord) string {
	switch {
	case rec.Code == 401 || rec.Code == 403 || strings.EqualFold(rec.Decision, "forbid"):
		return vocab.FlagDeniedExec
	case rec.Code >= 400:
		return vocab.FlagFailedExec
	}
	return ""
}

// podMatches compares what is known on both sides. With no pod metadata
// for the process, the session's verified roots fix its container; without
// those, the ID must have stayed in one container.
func (j *Joiner) podMatches(p *proc, rec *auditlog.ExecRecord, id string) bool {
	in := &p.in
	if differ(in.Namespace, rec.Namespace) || differ(in.Pod, rec.Pod) || differ(in.Container, rec.Container) {
		return false
	}
	if in.Pod != "" || in.ContainerID == "" || id != p.auditKey() {
		return true
	}
	st := j.ids[id]
	if st == nil {
		return true
	}
	if len(st.anchors) > 0 {
		_, ok := st.anchors[in.ContainerID]
		return ok
	}
	return len(st.containers) <= 1
}

func differ(a, b string) bool { return a != "" && b != "" && a != b }

// vouched reports whether p's parent, or failing that its session root, is
// in p's container and attributed by ID to session id.
func (j *Joiner) vouched(p *proc, id string) bool {
	anc := j.parentOf(p)
	if anc == nil && p.in.SessionRootID != p.in.ProcessID {
		if root := j.procs.get(p.in.SessionRootID); root != nil {
			anc = &parentView{res: root.res, sh: root.in.procShared}
		}
	}
	if anc == nil || anc.containerID() != p.in.ContainerID {
		return false
	}
	if base, _ := baseID(anc.res.auditID); base != id && anc.res.auditID != id {
		return false
	}
	return anc.res.attr == vocab.AttributionAuditID || anc.res.attr == vocab.AttributionInherited
}

// parentOf returns p's parent as held now, or as last seen if it has left
// memory since: forgetting an exited parent must not change the child.
func (j *Joiner) parentOf(p *proc) *parentView {
	if par := j.procs.get(p.in.ParentProcessID); par != nil && par != p {
		if p.parent.res == nil {
			p.parent.res = noResult
		}
		if p.parent.res != par.res {
			j.results.retain(par.res)
			j.results.release(p.parent.res)
			p.parent.res = par.res
		}
		if p.parent.sh != par.in.procShared {
			j.shares.retain(par.in.procShared)
			if p.parent.sh != nil {
				j.shares.release(p.parent.sh)
			}
			p.parent.sh = par.in.procShared
		}
	}
	if p.parent.res == nil {
		return nil
	}
	return &p.parent
}

// fallback handles a process with no usable ID: a descendant inherits its
// parent's attribution, an exec root goes to the heuristic.
func (j *Joiner) fallback(p *proc, r *result) {
	if p.in.ContainerID == "" && p.in.Pod == "" {
		return // a host process: no exec session to find
	}
	par := j.parentOf(p)
	if par == nil || par.containerID() != p.in.ContainerID {
		j.heuristic(p, r)
		return
	}
	switch par.res.attr {
	case vocab.AttributionAuditID, vocab.AttributionInherited:
		// The kernel lost the lineage (lineage_full, a restart); the
		// parent link itself is still the kernel's word.
		r.attr, r.auditID = vocab.AttributionInherited, par.res.auditID
	case vocab.AttributionHeuristic, vocab.AttributionAmbiguous:
		r.attr, r.auditID, r.confidence = par.res.attr, par.res.auditID, par.res.confidence
		r.candidates = slices.Clone(par.res.candidates)
	}
}

// setRoot files p in the exec-root index under pk ("": under none), and
// under its start's slot (rootsNear). A process's start is the kernel's
// start time of its task: it does not change while it is filed.
func (j *Joiner) setRoot(p *proc, pk string) {
	cur := ""
	if p.rootPod {
		cur = podKey(p.in.Namespace, p.in.Pod)
	}
	if pk == cur {
		return
	}
	t := p.startTime()
	if cur != "" {
		removeFrom(j.rootsPod, cur, p.in.ProcessID)
		if !t.IsZero() {
			removeFrom(j.rootsSlot, slotKey{cur, slotOf(t, j.cfg.HeuristicWindow)}, p.in.ProcessID)
		}
	}
	if pk != "" {
		addTo(j.rootsPod, pk, p.in.ProcessID)
		if !t.IsZero() {
			addTo(j.rootsSlot, slotKey{pk, slotOf(t, j.cfg.HeuristicWindow)}, p.in.ProcessID)
		}
	}
	p.rootPod = pk != ""
}

// moveSession updates session membership when a process's result changes.
func (j *Joiner) moveSession(p *proc, old, res *result) {
	// The session row does not change: the store counts its processes.
	if old.counted() {
		if rs := j.recOf(old.auditID); rs != nil {
			rs.members.remove(p)
		}
	}
	if res.counted() {
		if rs := j.recOf(res.auditID); rs != nil {
			if rs.members == nil {
				rs.members = &pset{}
			}
			rs.members.add(p)
		}
	}
}
