package join

import (
	"cmp"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/execid/correlator/pkg/vocab"
)

// The verified roots the joiner remembers per audit ID (and per exec bridge
// ID), and the pairing made from them: pairing.go holds the rule itself.

// rootsOf returns the verified roots that may hold rs's requests: those
// carrying its audit ID, and those carrying a bridge ID its requests name.
func (j *Joiner) rootsOf(rs *recSet) map[string]*rootInfo {
	roots := j.roots[rs.id]
	for _, v := range rs.spo {
		if !strings.HasPrefix(v, bridgePrefix) || len(j.roots[v]) == 0 {
			continue
		}
		merged := maps.Clone(roots)
		if merged == nil {
			merged = map[string]*rootInfo{}
		}
		maps.Copy(merged, j.roots[v])
		roots = merged
	}
	return roots
}

// addRoot remembers verified root p under id and re-pairs the ID.
func (j *Joiner) addRoot(id string, p *proc) {
	ri := rootInfo{start: p.startTime(), containerID: p.in.ContainerID, ns: p.in.Namespace, pod: p.in.Pod, ctrName: p.in.Container}
	if strings.HasPrefix(id, bridgePrefix) {
		ri.bridge, ri.ephemeral = id, ephemeralInit(p)
	}
	roots := j.roots[id]
	if roots == nil {
		roots = map[string]*rootInfo{}
		j.roots[id] = roots
	}
	old, ok := roots[p.in.ProcessID]
	if ok && *old == ri {
		return
	}
	if !ok && len(roots) >= maxRootsPerID {
		j.stats.RootsOverCap++
		return
	}
	if len(roots) == 0 {
		j.rootq.push(id, 0, j.now)
	}
	if !ok {
		j.rootCount++
	}
	roots[p.in.ProcessID] = &ri // never written to: rootsOf and the pairing share it
	j.repair(id)
	for _, x := range j.spo[id] {
		j.repair(x) // the audit IDs whose requests the bridge ID names
	}
	j.evictRoots()
}

// evictRoots bounds the roots remembered (MaxRecords in all): the oldest
// ID's roots go first, once neither its requests nor any carrier is held.
// A forgotten hold could let a later root take its request if the record
// came back (a lookup), so this is counted.
func (j *Joiner) evictRoots() {
	for n := j.rootq.size(); j.rootCount > j.cfg.MaxRecords && n > 0; n-- {
		e, ok := j.rootq.peek()
		if !ok {
			return
		}
		j.rootq.pop()
		roots := j.roots[e.id]
		if roots == nil {
			continue
		}
		if j.idInUse(e.id) {
			j.rootq.requeue(e) // in use: keep it, look at the next
			continue
		}
		j.stats.EvictedRoots += int64(len(roots))
		j.dropRoots(e.id)
	}
}

// rootReach is how long after its newest root started an ID's roots still
// decide anything held in memory: a record that late (the late window, or
// the pending TTL where longer) still weighs the ID-less roots started
// within the heuristic window, the audit lag and the clock skew of it.
func (j *Joiner) rootReach() time.Duration {
	c := j.cfg
	return max(c.LateWindow, c.PendingTTL) + c.HeuristicWindow + c.AuditLag + 2*c.ClockSkew
}

// ageRoots forgets the roots of an ID whose every request had ended when
// its record left, once neither a request nor a carrier of it is held and
// rootReach has passed since its newest root started. A root that starts
// later cannot fit an ended request (it must start before the end), and no
// ID-less root that could be its candidate is held any more. An ID whose
// requests were open (no end seen) or never came keeps its roots, within
// MaxRecords: a later root would fit it. Without this, a busy node
// remembered every root up to MaxRecords: 100,000, six hours and 60 MB at
// 300 execs/s (make soak's heap, growing all hour).
func (j *Joiner) ageRoots(now time.Time) {
	due := qtime(now.Add(-j.rootReach()))
	for e, ok := j.rootq.peek(); ok && e.t <= due; e, ok = j.rootq.peek() {
		j.rootq.pop()
		roots := j.roots[e.id]
		if roots == nil {
			continue
		}
		newest := e.t
		for _, r := range roots {
			newest = max(newest, qtime(r.start))
		}
		_, ended := j.rootsEnded[e.id]
		if newest > due || !ended || j.idInUse(e.id) {
			// Look again a reach from now: the queue stays in time order.
			j.rootq.requeue(qent{id: e.id, t: qtime(now)})
			continue
		}
		j.dropRoots(e.id)
	}
}

// idInUse: id's requests or a process carrying it (or naming it as its
// exec bridge or SPO value) are held.
func (j *Joiner) idInUse(id string) bool {
	return j.recs[id] != nil || j.ids[id] != nil || len(j.spo[id]) > 0 || j.spoProcs[id].len() > 0
}

func (j *Joiner) dropRoots(id string) {
	j.rootCount -= len(j.roots[id])
	delete(j.roots, id)
	delete(j.pairs, id)
	delete(j.rootsEnded, id)
}

// noteEnded records, as rs leaves, whether every request of its ID had
// ended, for ageRoots.
func (j *Joiner) noteEnded(rs *recSet) {
	if j.roots[rs.id] == nil {
		return
	}
	for _, r := range rs.recs {
		if r.EndTimestamp.IsZero() {
			delete(j.rootsEnded, rs.id)
			return
		}
	}
	j.rootsEnded[rs.id] = struct{}{}
}

// repair drops id's pairing and schedules what read it: the ID's carriers
// and the ID-less roots of its pods, whose candidates exclude held requests.
func (j *Joiner) repair(id string) {
	delete(j.pairs, id)
	j.enqueueRecord(id)
}

// forgetRoots drops id's pairing once neither its requests nor any
// process carrying it is held. Its roots stay (evictRoots bounds them): a
// root that left memory still holds its request if the record comes back.
func (j *Joiner) forgetRoots(id string) {
	if j.recs[id] == nil && j.ids[id] == nil {
		delete(j.pairs, id)
	}
}

// pairingOf returns id's pairing, made from what is held now.
func (j *Joiner) pairingOf(id string) *pairing {
	if pr := j.pairs[id]; pr != nil {
		return pr
	}
	pr := &pairing{}
	if rs := j.recs[id]; rs != nil {
		pr.keys = rs.keys()
		pr.unseen = len(rs.recs) == 1 && rs.conflict()
		var roots map[string]rootOutcome
		roots, pr.taken = pairRoots(rs.recs, j.rootsOf(rs), j.cfg.ClockSkew)
		pr.setRoots(roots)
	}
	j.pairs[id] = pr
	return pr
}

// RestoreRoots tells the joiner which verified roots a store kept under
// audit ID id, as the joiner emitted them: after a restart they hold their
// requests again, so a root that reused the ID is not taken for the first.
// Only the pairing learns them; no process row is made or changed.
func (j *Joiner) RestoreRoots(now time.Time, id string, stored []Process) []Update {
	added := false
	for i := range stored {
		p := &stored[i]
		if p.ProcessID == "" || (p.SessionRootID != "" && p.SessionRootID != p.ProcessID) ||
			p.Source != vocab.SourceEnv || slices.Contains(p.Flags, vocab.FlagRootUnverified) {
			continue
		}
		if base, _ := baseID(cmp.Or(p.AuditID, p.ClaimedAuditID)); base != id {
			continue
		}
		roots := j.roots[id]
		if roots == nil {
			roots = map[string]*rootInfo{}
			j.roots[id] = roots
			j.rootq.push(id, 0, now)
		}
		if _, ok := roots[p.ProcessID]; ok || len(roots) >= maxRootsPerID {
			continue
		}
		start := p.Start
		if start.IsZero() {
			start = p.ExecTime
		}
		roots[p.ProcessID] = &rootInfo{start: start, containerID: p.ContainerID, ns: p.Namespace, pod: p.Pod, ctrName: p.Container}
		j.rootCount++
		added = true
	}
	if !added {
		return nil
	}
	j.repair(id)
	j.advance(now)
	j.settle()
	j.evictRoots()
	return j.flush()
}
