package join

import (
	"time"

	"github.com/execid/correlator/pkg/vocab"
)

// idState indexes the processes carrying one captured audit ID.
type idState struct {
	procs pset
	// containers counts, by container ID, carriers without pod metadata;
	// anchors counts verified roots. Both fix which container the ID
	// belongs to when metadata cannot.
	containers map[string]int
	anchors    map[string]int
}

// index files p under its parent, session root, ID and SPO UID.
func (j *Joiner) index(p *proc) {
	in := &p.in
	if in.ParentProcessID != "" && in.ParentProcessID != in.ProcessID {
		fileProc(j.deps, in.ParentProcessID, p)
	}
	if r := in.SessionRootID; r != "" && r != in.ProcessID && r != in.ParentProcessID {
		fileProc(j.deps, r, p)
	}
	if v := in.SPO.Value; v != "" {
		fileProc(j.spoProcs, v, p)
	}
	if v := p.bridgeKey(); v != "" {
		fileProc(j.spoProcs, v, p)
		if isBridgeRoot(p) {
			j.addRoot(v, p)
		}
	}
	id := p.auditKey()
	if id == "" {
		return
	}
	st := j.ids[id]
	if st == nil {
		st = &idState{}
		j.ids[id] = st
	}
	st.procs.add(p)
	changed := false
	if in.Pod == "" && in.ContainerID != "" {
		changed = bump(&st.containers, in.ContainerID, 1) || changed
	}
	if isAnchor(p) {
		changed = bump(&st.anchors, in.ContainerID, 1) || changed
	}
	if isRoot(p) {
		j.addRoot(id, p)
	}
	if changed {
		// Which container the ID belongs to moved: every carrier re-checks.
		for q := range st.procs.all() {
			j.enqueue(q.in.ProcessID)
		}
	}
}

// unindex reverses index. Other carriers are not re-checked: a process
// leaving memory must not change what was already said about the rest.
func (j *Joiner) unindex(p *proc) {
	in := &p.in
	if in.ParentProcessID != "" {
		unfileProc(j.deps, in.ParentProcessID, p)
	}
	if in.SessionRootID != "" {
		unfileProc(j.deps, in.SessionRootID, p)
	}
	if v := in.SPO.Value; v != "" {
		unfileProc(j.spoProcs, v, p)
	}
	if v := p.bridgeKey(); v != "" {
		unfileProc(j.spoProcs, v, p)
	}
	id := p.auditKey()
	st := j.ids[id]
	if st == nil {
		return
	}
	st.procs.remove(p)
	if in.Pod == "" && in.ContainerID != "" {
		bump(&st.containers, in.ContainerID, -1)
	}
	if isAnchor(p) {
		bump(&st.anchors, in.ContainerID, -1)
	}
	if st.procs.len() == 0 {
		delete(j.ids, id)
		j.forgetRoots(id)
	}
}

// isAnchor: a verified session root, the kernel's word for the container.
func isAnchor(p *proc) bool {
	return p.in.Captured.Source == vocab.SourceEnv && p.in.ContainerID != "" && !p.hasFlag(vocab.FlagRootUnverified)
}

// bump adjusts a count and reports whether the key set changed; *m is
// made on first use (most IDs have neither kind of entry).
func bump(m *map[string]int, k string, d int) bool {
	n := (*m)[k] + d
	if n <= 0 {
		_, had := (*m)[k]
		delete(*m, k)
		return had
	}
	if *m == nil {
		*m = map[string]int{}
	}
	(*m)[k] = n
	return n == d
}

// Expire applies the pending TTL at now: processes still unmatched are
// flagged no_audit_record, exited processes and idle records past the TTL
// are forgotten (the store keeps them).
func (j *Joiner) Expire(now time.Time) []Update {
	ttl := j.cfg.PendingTTL
	due := qtime(now.Add(-ttl)) // entries at or before due are past the TTL
	for e, ok := j.procq.peek(pendHead); ok && e.t <= due; e, ok = j.procq.peek(pendHead) {
		j.procq.pop(pendHead)
		if p := j.procs.get(e.id); p != nil && p.seq == e.seq {
			if _, pending := j.pending[e.id]; pending {
				j.stats.Expired++
			}
			j.expire(p)
		}
	}
	// An exit can come due before its process's wait: the wait counts
	// from when the exec was taken in (read from the ring up to a drain
	// late), the exit from its kernel time. End such a wait here, or the
	// process would be forgotten unflagged and its stored row wait forever.
	var gone []*proc
	for e, ok := j.exitq.peek(); ok && e.t <= due; e, ok = j.exitq.peek() {
		j.exitq.pop()
		if p := j.procs.get(e.id); p != nil && p.seq == e.seq {
			if _, pending := j.pending[e.id]; pending {
				j.stats.Expired++
				j.expire(p)
			}
			gone = append(gone, p)
		}
	}
	j.advance(now)
	j.settle()
	gone = append(gone, j.doneAnswered(now)...)
	// Emit the expirations before forgetting exited processes: a session
	// that ran and exited within one TTL must still be flagged.
	out := j.flush()
	for _, p := range gone {
		if j.procs.get(p.in.ProcessID) != p {
			continue // both its TTL and its linger came due
		}
		if !j.keepLate(p) {
			j.removeProc(p)
		}
	}
	j.dropLate(now)
	idle := ttl + j.cfg.HeuristicWindow
	for id, rs := range j.recs {
		if now.Before(rs.touched.Add(idle)) || now.Before(rs.recheck) {
			continue
		}
		if !j.live(rs) {
			j.dropRecord(id)
			continue
		}
		// Live now, asked again an idle later rather than every tick: a
		// pod's hour of records held for late ones, each asked every
		// second, was the agent's CPU (make soak). It stays that much
		// longer at most, within MaxRecords.
		rs.recheck = now.Add(idle)
	}
	j.dropOrphans(now)
	j.ageRoots(now)
	j.compactQueues()
	j.shrinkMaps()
	return append(out, j.flush()...)
}

// expire stops p waiting: it leaves the pending set and the exec-root index.
// Only a waiting result or an exec root reads expired: any other is
// re-resolved (expired then) only when something it reads changes, so
// the bulk of processes passing the TTL is not resolved again.
func (j *Joiner) expire(p *proc) {
	if p.expired {
		return
	}
	p.expired = true
	if p.res.waiting || p.res.execRoot {
		j.enqueue(p.in.ProcessID)
	}
}

// expireOldest makes room in the pending set by ending the oldest wait.
func (j *Joiner) expireOldest() {
	for e, ok := j.procq.peek(pendHead); ok; e, ok = j.procq.peek(pendHead) {
		j.procq.pop(pendHead)
		p := j.procs.get(e.id)
		if p == nil || p.seq != e.seq || p.expired {
			continue
		}
		_, pending := j.pending[e.id]
		delete(j.pending, e.id)
		j.expire(p)
		if pending {
			// Its row said it waited until the TTL: say it no longer does.
			j.dirtyProcs[e.id] = true
			j.stats.EvictedPending++
			return
		}
	}
}

// live reports whether a held process carries or is attributed to the
// record's session: new descendants may still need it, and a process kept
// for a late record must meet every record it would have met in time.
func (j *Joiner) live(rs *recSet) bool {
	for m := range rs.members.all() {
		// By ID, as ever: a member is a process of that ID.
		if j.procs.get(m.in.ProcessID) != nil {
			return true
		}
	}
	if st := j.ids[rs.id]; st != nil && st.procs.len() > 0 {
		return true
	}
	// A candidate of a held ID-less root: a later record re-decides the
	// root, and must find every request it would have found in time.
	live := false
	j.rootsNear(rs, func(*proc) bool { live = true; return false })
	return live
}

// rootsNear calls fn with each held ID-less root that a request of rs
// could be a candidate of (score: its pod, started within W of its
// requestReceived), until fn returns false. By the roots' start slots:
// the expiry tick asks this of every idle record, and a pod holds an
// hour of roots for late records.
func (j *Joiner) rootsNear(rs *recSet, fn func(*proc) bool) {
	w := j.cfg.HeuristicWindow
	for _, rec := range rs.recs {
		rr, pk := rec.RequestReceivedTimestamp, podKey(rec.Namespace, rec.Pod)
		if rr.IsZero() || pk == "" {
			continue
		}
		for s := slotOf(rr.Add(-w), w); s <= slotOf(rr.Add(w), w); s++ {
			for id := range j.rootsSlot[slotKey{pk, s}] {
				p := j.procs.get(id)
				if p == nil {
					continue
				}
				if t := p.startTime(); !t.Before(rr.Add(-w)) && !t.After(rr.Add(w)) && !fn(p) {
					return
				}
			}
		}
	}
}

// removeProc forgets a process; the store still counts it in its session.
func (j *Joiner) removeProc(p *proc) {
	id := p.in.ProcessID
	j.keepHeld(p)
	j.unindex(p)
	j.setRoot(p, "")
	j.dropHeld(p, false)
	if p.res.counted() {
		if rs := j.recOf(p.res.auditID); rs != nil {
			rs.members.remove(p)
		}
	}
	// A verified root's pairing outlives it (j.roots): it still started its
	// session, so no later root may take its request.
	delete(j.pending, id)
	delete(j.deps, id)
	j.procs.del(id)
	delete(j.dirtyProcs, id)
	j.procBytes -= int(p.size)
	j.disown(&p.in)
	j.results.release(p.res)
	if p.parent.res != nil {
		j.results.release(p.parent.res)
		j.shares.release(p.parent.sh)
	}
}

// compactQueues drops entries for processes and records already gone.
func (j *Joiner) compactQueues() {
	heldProc := func(e qent) bool { p := j.procs.get(e.id); return p != nil && p.seq == e.seq }
	j.procq.compact(j.procs.len(), heldProc)
	j.exitq.compact(j.procs.len(), heldProc)
	j.doneq.compact(j.procs.len(), heldProc)
	j.orphanq.compact(len(j.orphans), j.orphanHeld)
	heldRec := func(e qent) bool { rs := j.recs[e.id]; return rs != nil && rs.seq == e.seq }
	j.recq.compact(len(j.recs), heldRec)
	j.deniedq.compact(j.denied, func(e qent) bool { return heldRec(e) && j.recs[e.id].denied })
}

// bigMap is the size past which a map emptied or mostly emptied is made
// anew: Go maps never give their buckets back, so after a burst (a pod's
// 100,000 processes exiting) they would hold the burst's memory for good.
const bigMap = 4096

// emptied clears m, or replaces it if it was big.
func emptied[K comparable, V any](m map[K]V) map[K]V {
	if len(m) > bigMap {
		return map[K]V{}
	}
	clear(m)
	return m
}

// shrunk copies m into a map of its size once it holds under a quarter of
// its high-water mark, *peak, which it keeps.
func shrunk[K comparable, V any](m map[K]V, peak *int) map[K]V {
	n := len(m)
	if n > *peak {
		*peak = n
	}
	if *peak <= bigMap || n >= *peak/4 {
		return m
	}
	*peak = n
	out := make(map[K]V, n)
	for k, v := range m {
		out[k] = v
	}
	return out
}

// shrinkMaps lets the long-lived maps shed what a burst left behind.
func (j *Joiner) shrinkMaps() {
	p := &j.peaks
	j.deps, j.ids = shrunk(j.deps, &p[1]), shrunk(j.ids, &p[2]) // j.procs shrinks itself
	j.spoProcs, j.recs, j.pending = shrunk(j.spoProcs, &p[3]), shrunk(j.recs, &p[4]), shrunk(j.pending, &p[5])
	j.orphans, j.recsPod, j.rootsPod = shrunk(j.orphans, &p[6]), shrunk(j.recsPod, &p[7]), shrunk(j.rootsPod, &p[8])
	j.rootsSlot = shrunk(j.rootsSlot, &p[9])
}

// addTo and removeFrom keep a map of sets, dropping emptied sets.
func addTo[K, V comparable](m map[K]map[V]struct{}, k K, v V) bool {
	s := m[k]
	if s == nil {
		s = map[V]struct{}{}
		m[k] = s
	}
	if _, ok := s[v]; ok {
		return false
	}
	s[v] = struct{}{}
	return true
}

func removeFrom[K, V comparable](m map[K]map[V]struct{}, k K, v V) {
	if s := m[k]; s != nil {
		delete(s, v)
		if len(s) == 0 {
			delete(m, k)
		}
	}
}
