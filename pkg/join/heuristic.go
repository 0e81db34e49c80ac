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
}

// heuristic matches an ID-less exec root to exec requests of its pod whose
// [requestReceived-W, end+W] holds the process start, scored by the argv
// the runtime exec'd (the root's first image: what the request's command=
// names). One request starts one root: a request a verified root holds,
// or the only candidate of another ID-less root, is not a candidate here.
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
	j.setHeld(p, pk, cands)
	if len(cands) == 0 {
		j.uncovered(p, r)
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

// candidates scores every request of pod pk for root p, best first; an
// exact argv match sets partial ones aside (beaten).
func (j *Joiner) candidates(p *proc, pk string, t time.Time) ([]candidate, bool) {
	var cands []candidate
	for id := range j.recsPod[pk] {
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

// setHeld records p's only candidate (or none) in j.heldPod, re-resolving
// the pod's other ID-less roots when it changes. The index keeps roots past
// the pending TTL too, so that expiring one does not change another.
func (j *Joiner) setHeld(p *proc, pk string, cands []candidate) {
	held := ""
	if len(cands) == 1 && pk != "" {
		held = pk + "\x00" + cands[0].auditID
	}
	if held == p.held {
		return
	}
	j.dropHeld(p)
	if held == "" {
		return
	}
	addTo(j.heldPod, held, p.in.ProcessID)
	p.held = held
	if len(j.heldPod[held]) <= 2 {
		j.heldChanged(held, p)
	}
}

// dropHeld removes p from j.heldPod.
func (j *Joiner) dropHeld(p *proc) {
	if p.held == "" {
		return
	}
	held := p.held
	removeFrom(j.heldPod, held, p.in.ProcessID)
	p.held = ""
	if len(j.heldPod[held]) <= 1 {
		j.heldChanged(held, p)
	}
}

// heldChanged re-resolves the other ID-less roots of the pod of held (pod
// and session key) after its holders crossed 0, 1 or 2: heldByOther reads
// only that. Past two holders nobody's answer moves, so a flood of roots
// contending for one request costs each one resolution, not one per root.
func (j *Joiner) heldChanged(held string, p *proc) {
	pk, _, _ := strings.Cut(held, "\x00")
	for id := range j.rootsPod[pk] {
		if id != p.in.ProcessID {
			j.enqueue(id)
		}
	}
}

// heldByOther reports whether another ID-less root of pod pk has key as its
// only candidate.
func (j *Joiner) heldByOther(p *proc, pk, key string) bool {
	set := j.heldPod[pk+"\x00"+key]
	_, mine := set[p.in.ProcessID]
	return len(set) > 1 || (len(set) == 1 && !mine)
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
	w := j.cfg.HeuristicWindow
	end := rec.EndTimestamp
	if end.IsZero() {
		end = rr // open session: the root starts right after the request
	}
	if t.Before(rr.Add(-w)) || t.After(end.Add(w)) {
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
	return candidate{auditID: rec.AuditID, base: base, score: s}, true
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
