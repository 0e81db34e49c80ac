package join

import (
	"cmp"
	"math"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/execid/correlator/pkg/auditlog"
	"github.com/execid/correlator/pkg/vocab"
)

// Argv scores: how well a process image matches an audit command=.
const (
	scoreExact     = 1.0 // argv == command
	scoreBasename  = 0.9 // same args, argv[0] differs only by directory
	scoreTruncated = 0.8 // argv truncated by capture, a prefix of command
	scoreProgram   = 0.6 // same program, other args
	scoreFilename  = 0.5 // only the exec'd file's name matches command[0]
	// scoreUnknown: the record does not say what ran (GKE logs no exec
	// query string), so only the pod and the time match.
	scoreUnknown = 0.4
)

// Confidence shaping. A heuristic is never certain.
const (
	maxConfidence     = 0.95
	defaultCtrPenalty = 0.9 // one side does not name the container
	beatenPenalty     = 0.9 // weaker candidates were set aside
)

type candidate struct {
	auditID string
	base    float64
	score   float64
	rr      time.Time // the request's requestReceived
}

// heuristic matches an ID-less exec root to exec requests of its pod whose
// [requestReceived-W, requestReceived+W] holds the process start, scored by the argv
// the runtime exec'd (the root's first image: what the request's command=
// names). One request starts one root: a request a verified root holds,
// or the only candidate of another settled ID-less root, is not a
// candidate here.
//
// No answer is given before the root's window has closed (windowClosed):
// until every record that could fit has had time to arrive, one request
// that fits alone says nothing, and the root stays pending. What it says
// then is a function of the records and roots held, not of which came
// first (design.md, join rule 7).
func (j *Joiner) heuristic(p *proc, r *result) {
	r.execRoot = true
	r.waiting = true
	pk := podKey(p.in.Namespace, p.in.Pod)
	t := p.startTime()
	var cands []candidate
	beaten := false
	if pk != "" && !t.IsZero() {
		cands, beaten = j.candidates(p, pk, t)
	}
	closed := j.windowClosed(p)
	j.setHeld(p, pk, cands, closed)
	// Until it answers, the root waits for its window's bound
	// (windowed), but for one that no request fits once the window
	// closed: that one waits out the pending TTL.
	if len(cands) == 0 {
		j.uncovered(p, r)
		if !closed {
			j.awaitWindow(p, j.windowDeadline(p))
			r.windowed = true
		}
		return
	}
	if !closed {
		j.awaitWindow(p, j.windowDeadline(p))
		r.windowed = true
		return
	}
	// Every other root that could have one of these requests as its only
	// candidate started within W of it and has its own window closed by
	// then: until that, a hold still to come could change the answer.
	if due := j.holdsDeadline(cands); !p.expired && j.now.Before(due) {
		j.awaitWindow(p, due)
		r.windowed = true
		return
	}
	r.waiting = false
	free := cands[:0:0]
	for _, c := range cands {
		if !j.heldByOther(p, pk, c.auditID) {
			free = append(free, c)
		}
	}
	switch {
	case len(free) == 0:
		// Another root has only these requests to be: neither is sure.
		free, beaten = cands, false
		if len(free) == 1 {
			r.attr, r.candidates = vocab.AttributionAmbiguous, []string{free[0].auditID}
			return
		}
	case len(free) < len(cands):
		beaten = true
	}
	if len(free) == 1 {
		conf := free[0].score
		if beaten {
			conf *= beatenPenalty
		}
		r.attr, r.auditID = vocab.AttributionHeuristic, free[0].auditID
		r.confidence = math.Round(min(conf, maxConfidence)*1000) / 1000
		return
	}
	r.attr = vocab.AttributionAmbiguous
	for _, c := range free {
		r.candidates = append(r.candidates, c.auditID)
	}
}

// windowDeadline is when every record that could fit root p has had time
// to reach the node: a fitting request was received by start+W, and its
// record arrives at most AuditLag after that.
func (j *Joiner) windowDeadline(p *proc) time.Time {
	return p.startTime().Add(j.cfg.HeuristicWindow + j.cfg.AuditLag)
}

// windowClosed reports whether root p's records are all in, by the time
// the joiner was last given (or p's wait ended early: the pending TTL or
// the MaxPending bound).
func (j *Joiner) windowClosed(p *proc) bool {
	return p.expired || p.startTime().IsZero() || !j.now.Before(j.windowDeadline(p))
}

// holdsDeadline is when the windows of all roots that could contend for
// cands have closed: a contender starts at most W after a request was
// received, and its window closes W + AuditLag after that.
func (j *Joiner) holdsDeadline(cands []candidate) time.Time {
	var last time.Time
	for _, c := range cands {
		if c.rr.After(last) {
			last = c.rr
		}
	}
	return last.Add(2*j.cfg.HeuristicWindow + j.cfg.AuditLag)
}

// awaitWindow schedules p to be resolved again at due (once at a time: a
// root woken early schedules itself again).
func (j *Joiner) awaitWindow(p *proc, due time.Time) {
	if p.awaiting {
		return
	}
	p.awaiting = true
	j.windowq.push(qent{id: p.in.ProcessID, seq: p.seq, t: qtime(due)})
}

// advance moves the joiner's time to now (never back) and schedules the
// roots whose window closed by then; the caller settles.
func (j *Joiner) advance(now time.Time) {
	if now.After(j.now) {
		j.now = now
	}
	due := qtime(j.now)
	for j.windowq.Len() > 0 && j.windowq.items[0].t <= due {
		e := j.windowq.pop()
		if p := j.procs.get(e.id); p != nil && p.seq == e.seq {
			p.awaiting = false
			j.enqueue(e.id)
		}
	}
}

// candidates scores every request of pod pk for root p, best first; an
// exact argv match sets partial ones aside (beaten).
func (j *Joiner) candidates(p *proc, pk string, t time.Time) ([]candidate, bool) {
	var cands []candidate
	// Only the slots of W around t: a pod's records of an hour are live
	// for late ones, and only those received within W of t can fit.
	w := j.cfg.HeuristicWindow
	var buf [32]string
	seen := buf[:0]
	for s := slotOf(t.Add(-w), w); s <= slotOf(t.Add(w), w); s++ {
		for id := range j.recsPod[slotKey{pk, s}] {
			seen = append(seen, id)
		}
	}
	slices.Sort(seen) // a conflict's requests may span two slots
	for _, id := range slices.Compact(seen) {
		rs := j.recs[id]
		if rs == nil {
			continue
		}
		var taken []bool
		if len(j.roots[id]) > 0 {
			taken = j.pairingOf(id).taken
		}
		keys := rs.keys()
		for i, rec := range rs.recs {
			if podKey(rec.Namespace, rec.Pod) != pk || (taken != nil && taken[i]) {
				continue
			}
			if c, ok := j.score(p, rec, t); ok {
				c.auditID = keys[i]
				cands = append(cands, c)
			}
		}
	}
	slices.SortFunc(cands, func(a, b candidate) int {
		if c := cmp.Compare(b.score, a.score); c != 0 {
			return c
		}
		return strings.Compare(a.auditID, b.auditID)
	})
	if len(cands) == 0 || cands[0].base < scoreExact {
		return cands, false
	}
	kept := cands[:0]
	for _, c := range cands {
		if c.base >= scoreExact {
			kept = append(kept, c)
		}
	}
	return kept, len(kept) < len(cands)
}

// setHeld records p's only candidate in j.heldPod once p's window has
// closed (a root still waiting for records holds nothing: a record to come
// may give it a second candidate), re-resolving the pod's other ID-less
// roots when the count of holders crosses 0, 1 or 2. The index keeps roots
// past the pending TTL too, so that expiring one does not change another.
func (j *Joiner) setHeld(p *proc, pk string, cands []candidate, closed bool) {
	held := ""
	if closed && len(cands) == 1 && pk != "" {
		held = pk + "\x00" + cands[0].auditID
	}
	if held == p.held() {
		return
	}
	j.dropHeld(p, true)
	if held == "" {
		return
	}
	j.heldPod[held]++
	p.rareFields().held = held
	if j.heldPod[held] <= 2 {
		j.heldChanged(held, p)
	}
}

// dropHeld removes p from j.heldPod; notify re-resolves the pod's other
// roots if that moves their answers. A root leaving memory does not: what
// was said of the others stands (they are held past their wait for late
// records, and forgetting one must not change another).
func (j *Joiner) dropHeld(p *proc, notify bool) {
	held := p.held()
	if held == "" {
		return
	}
	p.rare.held = ""
	n := j.heldPod[held] - 1
	if n <= 0 {
		delete(j.heldPod, held)
	} else {
		j.heldPod[held] = n
	}
	if n <= 1 && notify {
		j.heldChanged(held, p)
	}
}

// heldChanged re-resolves the other ID-less roots of the pod of held (pod
// and session key) after its holders crossed 0, 1 or 2: heldByOther reads
// only that. Past two holders nobody's answer moves, so a flood of roots
// contending for one request costs each one resolution, not one per root.
func (j *Joiner) heldChanged(held string, p *proc) {
	pk, key, _ := strings.Cut(held, "\x00")
	j.enqueueRootsNear(pk, j.recs[key], p.in.ProcessID)
}

// enqueueRootsNear re-resolves the ID-less roots of pod pk that a request
// of rs could be a candidate of: those started within W of one of its
// requestReceived (score's window); all of them when rs is not held. The
// others' candidates do not hold rs, so neither it nor its holders move
// their answers: with an hour of roots held for late records, asking them
// all at every record was the agent's whole CPU (make soak).
func (j *Joiner) enqueueRootsNear(pk string, rs *recSet, skip string) {
	if rs == nil {
		for id := range j.rootsPod[pk] {
			if id != skip {
				j.enqueue(id)
			}
		}
		return
	}
	j.rootsNear(rs, func(p *proc) bool {
		if id := p.in.ProcessID; id != skip && podKey(p.in.Namespace, p.in.Pod) == pk {
			j.enqueue(id)
		}
		return true
	})
}

// heldByOther reports whether another settled ID-less root of pod pk has
// key as its only candidate.
func (j *Joiner) heldByOther(p *proc, pk, key string) bool {
	k := pk + "\x00" + key
	n := j.heldPod[k]
	if p.held() == k {
		n--
	}
	return n > 0
}

// score rates one record for an exec root starting at t.
func (j *Joiner) score(p *proc, rec *auditlog.ExecRecord, t time.Time) (candidate, bool) {
	if rec.Subresource != auditlog.SubresourceExec && rec.Subresource != auditlog.SubresourceEphemeralContainers {
		return candidate{}, false
	}
	if differ(p.in.Container, rec.Container) || outcome(rec) != "" {
		return candidate{}, false
	}
	if j.cfg.BridgeCaptured && len(bridgeValues(rec.Annotations)) > 0 {
		// The bridge covered this request: its root carries the ID.
		return candidate{}, false
	}
	rr := rec.RequestReceivedTimestamp
	if rr.IsZero() {
		return candidate{}, false
	}
	// The runtime execs a request's root as its stream opens, so only
	// requestReceived says when: a root started later in a long session is
	// not its root, and a window that grew with the session's end would
	// let a record's last stage, read long after, re-decide a settled root.
	w := j.cfg.HeuristicWindow
	if t.Before(rr.Add(-w)) || t.After(rr.Add(w)) {
		return candidate{}, false
	}
	base := argvScore(p.firstImage(), p.firstFilename(), rec.Command, p.in.ArgvTruncated)
	if base == 0 && len(stripEnvPrefix(rec.Command)) == 0 {
		base = scoreUnknown
	}
	if base == 0 {
		return candidate{}, false
	}
	// Proximity to requestReceived breaks ties: the root is exec'd as the
	// stream opens, not later in the session.
	prox := 1.0
	if d := t.Sub(rr).Abs(); w > 0 {
		prox = 1 - min(1, float64(d)/float64(w))
	} else if d > 0 {
		prox = 0
	}
	s := base * (0.9 + 0.1*prox)
	if p.in.Container == "" || rec.Container == "" {
		s *= defaultCtrPenalty
	}
	return candidate{auditID: rec.AuditID, base: base, score: s, rr: rr}, true
}

// argvScore matches the image the runtime exec'd against command.
func argvScore(argv []string, filename string, command []string, truncated bool) float64 {
	command = stripEnvPrefix(command)
	if len(command) == 0 {
		return 0
	}
	best := argvMatch(argv, command, truncated)
	if best == 0 && filename != "" && path.Base(filename) == path.Base(command[0]) {
		best = scoreFilename
	}
	return best
}

func argvMatch(argv, command []string, truncated bool) float64 {
	if len(argv) == 0 {
		return 0
	}
	if slices.Equal(argv, command) {
		return scoreExact
	}
	if path.Base(argv[0]) != path.Base(command[0]) {
		return 0
	}
	if slices.Equal(argv[1:], command[1:]) {
		return scoreBasename
	}
	if truncated && len(argv) <= len(command) {
		n := len(argv) - 1
		if n == 0 || (slices.Equal(argv[1:n], command[1:n]) && strings.HasPrefix(command[n], argv[n])) {
			return scoreTruncated
		}
	}
	return scoreProgram
}

// stripEnvPrefix undoes the rewrite of command to `env KEY=<id>
// <command...>` by the SPO exec webhook (SPO_EXEC_REQUEST_UID) or
// correlator's exec bridge (vocab.BridgeKey); the audit record keeps the
// caller's command.
func stripEnvPrefix(argv []string) []string {
	if len(argv) >= 2 && path.Base(argv[0]) == "env" &&
		(strings.HasPrefix(argv[1], vocab.SPOKey+"=") || strings.HasPrefix(argv[1], vocab.BridgeKey+"=")) {
		return argv[2:]
	}
	return argv
}

// uncovered flags an exec root the runtime exec'd (never an entrypoint)
// that no allowed exec request of its pod explains once the pending TTL has
// passed: an exec sent straight to the kubelet (nodes/proxy) or to the
// runtime bypasses admission, so no audit record and no bridge ID name it.
// It is nobody's session, and counted.
func (j *Joiner) uncovered(p *proc, r *result) {
	if !p.expired || !p.runtimeExec() || p.in.Pod == "" {
		return
	}
	r.flag(vocab.FlagUncoveredExec)
	if !p.uncovered {
		p.uncovered = true
		j.stats.UncoveredExecs++
	}
}
