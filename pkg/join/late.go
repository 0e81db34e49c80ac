package join

import (
	"slices"
	"time"

	"github.com/execid/correlator/pkg/capture"
	"github.com/execid/correlator/pkg/vocab"
)

// A record later than the pending TTL must still name the user: the clouds
// deliver audit logs minutes late, and a backlog after an outage is hours.
// So an exited process of an exec session is kept past the TTL, until
// Config.LateWindow after its start, with everything it reads: its record
// (live), its ID's roots (j.roots) and, for an ID-less root, the exec-root
// index. A record that comes then is joined on the same data it would
// have met in time, by the same rules; what it changes is flagged
// late_audit_record with the delay. After a restart the agent hands the
// store's unattributed processes back (RestoreProcesses).

// keepLate keeps an exited process past the TTL when a late record could
// still change its answer; it reports whether it did.
func (j *Joiner) keepLate(p *proc) bool {
	w := j.cfg.LateWindow
	if w <= 0 || j.answered(p) || !j.sessionProc(p, 16) {
		return false
	}
	due := p.startTime().Add(w)
	if !j.now.Before(due) {
		j.forgetLate(p)
		return false
	}
	j.lateq.push(qent{id: p.in.ProcessID, seq: p.seq, t: qtime(due)})
	j.stats.LateKept++
	return true
}

// answered reports whether p's answer is its record's: the record of the
// ID it carries is in and decided it, not a heuristic. No late record can
// give it another (apart from a second request under the same ID, which
// kube-apiserver never makes: the joiner flags that conflict on what it
// still holds, and on the session). Holding such processes for the window
// would cost a busy node its memory (make soak: 300 execs/s, an hour, a
// million processes) for nothing.
func (j *Joiner) answered(p *proc) bool {
	switch p.res.attr {
	case vocab.AttributionHeuristic, vocab.AttributionAmbiguous:
		return false
	}
	return p.res.auditID != "" && j.recs[p.res.auditID] != nil
}

// AnsweredLinger is how long after its exit a process its own record
// answered stays in memory (at most the pending TTL): long enough for a
// child exec'd as the parent exits to read it from the same drain, and no
// longer, since no record can answer it again. Holding every such process
// for the whole TTL was most of a busy node's heap (make soak: 90,000
// processes at 300 execs/s). Its request's pairing outlives it (j.roots).
const AnsweredLinger = 30 * time.Second

// pushExit queues p's exit for the TTL and for AnsweredLinger.
func (j *Joiner) pushExit(p *proc, e Exit) {
	j.exitq.push(e.ProcessID, p.seq, e.Time)
	if j.cfg.PendingTTL > AnsweredLinger {
		j.doneq.push(e.ProcessID, p.seq, e.Time)
		p.answeredSeen = j.answered(p)
	}
}

// doneAnswered returns the exited processes that their own record
// answered at least AnsweredLinger ago (at their exit, or at the last look),
// to leave memory with the TTL's.
func (j *Joiner) doneAnswered(now time.Time) []*proc {
	var gone []*proc
	due := qtime(now.Add(-AnsweredLinger))
	for e, ok := j.doneq.peek(); ok && e.t <= due; e, ok = j.doneq.peek() {
		j.doneq.pop()
		p := j.procs.get(e.id)
		if p == nil || p.seq != e.seq || p.exit == nil {
			continue
		}
		answered := j.answered(p)
		if !answered || !p.answeredSeen {
			// Its record may still come (a session's records reach the
			// node as it ends), or came since the last look: look again
			// a linger later, so that it leaves at least a linger after
			// its answer (a second request under its ID comes with the
			// first's), not at the TTL.
			p.answeredSeen = answered
			if answered || p.res.waiting {
				j.doneq.requeue(qent{id: e.id, seq: e.seq, t: qtime(now)})
			}
			continue
		}
		if _, pending := j.pending[e.id]; !pending {
			gone = append(gone, p)
		}
	}
	return gone
}

// OrphanLinger is how long an exit read before its exec (another CPU's
// ring drained first) waits for it, at most the pending TTL. Most such
// exits have no exec to wait for: a shell's forked child that runs a
// builtin or a busybox applet and exits without exec'ing. Held for the
// whole TTL, they were a quarter of a busy node's heap (make soak: a loop
// of usleep and /bin/true, 300 a second), and the expiry tick scanned them
// all every second.
const OrphanLinger = 30 * time.Second

// dropOrphans forgets the orphan exits past OrphanLinger.
func (j *Joiner) dropOrphans(now time.Time) {
	due := qtime(now.Add(-min(j.cfg.PendingTTL, OrphanLinger)))
	for e, ok := j.orphanq.peek(); ok && e.t <= due; e, ok = j.orphanq.peek() {
		j.orphanq.pop()
		if j.orphanHeld(e) {
			delete(j.orphans, e.id)
		}
	}
}

// orphanHeld reports whether e is an orphan exit still held.
func (j *Joiner) orphanHeld(e qent) bool {
	o, ok := j.orphans[e.id]
	return ok && qtime(o.Time) == e.t
}

// sessionProc reports whether p belongs to an exec session whose answer a
// record could still give or change: it carries an ID (the audit ID key,
// the bridge's, SPO's), is an ID-less exec root, or descends from one in
// its container. A container's own processes (its entrypoint's lineage)
// are none of these and leave at the TTL, as ever.
func (j *Joiner) sessionProc(p *proc, depth int) bool {
	in := &p.in
	if in.ContainerID == "" && in.Pod == "" {
		return false // a host process: no exec session to find
	}
	switch {
	case in.Captured.Value != "", in.Bridge.Value != "", in.SPO.Value != "":
		return true
	case p.res.execRoot && execOrigin(p.origin()):
		return true
	case p.res.attr == vocab.AttributionHeuristic, p.res.attr == vocab.AttributionAmbiguous:
		return true
	case p.parent.res != nil && p.parent.res.execRoot && p.parent.res.attr == vocab.AttributionNone &&
		slices.Contains(p.parent.res.flags, vocab.FlagUncoveredExec):
		return true // its parent, an uncovered exec, has left memory
	}
	if par := j.procs.get(in.ParentProcessID); depth > 0 && par != nil && par != p && par.in.ContainerID == in.ContainerID {
		return j.sessionProc(par, depth-1)
	}
	return false
}

// execOrigin: an image the runtime exec'd from outside, or one whose origin
// the probe could not tell; never a container's entrypoint or its own code.
func execOrigin(o capture.Origin) bool {
	return o.Verified() || o == "" || o == capture.OriginUnknown
}

// dropLate forgets the kept processes whose window has closed.
func (j *Joiner) dropLate(now time.Time) {
	due := qtime(now)
	for j.lateq.Len() > 0 && j.lateq.items[0].t <= due {
		e := j.lateq.pop()
		if p := j.procs.get(e.id); p != nil && p.seq == e.seq {
			j.forgetLate(p)
			j.removeProc(p)
		}
	}
	if j.lateq.Len() > 2*j.procs.len()+1024 {
		kept := j.lateq.items[:0]
		for _, e := range j.lateq.items {
			if p := j.procs.get(e.id); p != nil && p.seq == e.seq {
				kept = append(kept, e)
			}
		}
		// Filtering a heap in place keeps it one only by luck: rebuild it.
		j.lateq.items = nil
		for _, e := range kept {
			j.lateq.push(e)
		}
	}
}

// forgetLate counts a process leaving while a record could still have
// answered it: it still waits for one, or is an ID-less root.
func (j *Joiner) forgetLate(p *proc) {
	if p.res.waiting || p.res.execRoot || p.hasJoinFlag(vocab.FlagNoAuditRecord) {
		j.stats.LateForgotten++
	}
}

// hasJoinFlag reports whether p's result carries join flag f.
func (p *proc) hasJoinFlag(f string) bool { return slices.Contains(p.res.flags, f) }

// lateAt is when a record answered p late; zero if none did.
func (p *proc) lateAt() time.Time {
	if p.rare == nil {
		return time.Time{}
	}
	return p.rare.lateAt
}

// seenBefore notes p's result before the arriving record changed it, the
// first time in a settle that it does.
func (j *Joiner) seenBefore(p *proc, old *sharedResult) {
	if j.before == nil {
		j.before = map[string]*sharedResult{}
	}
	if _, ok := j.before[p.in.ProcessID]; !ok {
		j.before[p.in.ProcessID] = old
	}
}

// noteLate flags each process whose answer the arriving record changed
// (net, over the whole settle: the order a settle visits processes in must
// not matter) after its wait for one had ended: the TTL ran out (expired),
// or the heuristic window of an ID-less root closed on an answer. A record
// within the wait is on time, whatever it changes.
func (j *Joiner) noteLate() {
	for id, old := range j.before {
		p := j.procs.get(id)
		if p == nil || !p.lateAt().IsZero() || p.res.equal(&old.result) {
			continue
		}
		if !p.expired && (!old.execRoot || old.waiting) {
			continue
		}
		p.rareFields().lateAt = j.now
		j.sizeProc(p)
		j.stats.LateProcesses++
	}
	clear(j.before)
}

// cloneKV copies a key's evidence, sharing nothing with the joiner.
func cloneKV(kv capture.KeyValue) capture.KeyValue {
	kv.Flags = slices.Clone(kv.Flags)
	return kv
}
