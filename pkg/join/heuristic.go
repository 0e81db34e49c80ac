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

// heuristic matches an ID-less exec root to exec records of its pod whose
// [requestReceived-W, end+W] holds the process start, scored by argv.
func (j *Joiner) heuristic(p *proc, r *result) {
	r.execRoot = true
	r.waiting = true
	pk := podKey(p.in.Namespace, p.in.Pod)
	t := p.startTime()
	if pk == "" || t.IsZero() {
		return
	}
	var cands []candidate
	for id := range j.recsPod[pk] {
		rs := j.recs[id]
		if rs == nil || rs.claimed > 0 {
			continue
		}
		best := candidate{auditID: id}
		for _, rec := range rs.recs {
			if podKey(rec.Namespace, rec.Pod) != pk {
				continue
			}
			if c, ok := j.score(p, rec, t); ok && c.score > best.score {
				best = c
			}
		}
		if best.score > 0 {
			cands = append(cands, best)
		}
	}
	if len(cands) == 0 {
		return
	}
	r.waiting = false
	slices.SortFunc(cands, func(a, b candidate) int {
		if c := cmp.Compare(b.score, a.score); c != 0 {
			return c
		}
		return strings.Compare(a.auditID, b.auditID)
	})
	beaten := false
	if cands[0].base >= scoreExact {
		// An exact argv match outranks partial ones outright.
		kept := cands[:0]
		for _, c := range cands {
			if c.base >= scoreExact {
				kept = append(kept, c)
			}
		}
		beaten = len(kept) < len(cands)
		cands = kept
	}
	if len(cands) == 1 {
		conf := cands[0].score
		if beaten {
			conf *= beatenPenalty
		}
		r.attr, r.auditID = vocab.AttributionHeuristic, cands[0].auditID
		r.confidence = math.Round(min(conf, maxConfidence)*1000) / 1000
		return
	}
	r.attr = vocab.AttributionAmbiguous
	for _, c := range cands {
		r.candidates = append(r.candidates, c.auditID)
	}
}

// score rates one record for an exec root starting at t.
func (j *Joiner) score(p *proc, rec *auditlog.ExecRecord, t time.Time) (candidate, bool) {
	if rec.Subresource != auditlog.SubresourceExec && rec.Subresource != auditlog.SubresourceEphemeralContainers {
		return candidate{}, false
	}
	if differ(p.in.Container, rec.Container) || outcome(rec) != "" {
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
	base := argvScore(p.imageList(), p.in.Filename, rec.Command, p.in.ArgvTruncated)
	if base == 0 && len(stripSPOPrefix(rec.Command)) == 0 {
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

// argvScore is the best match of any image of the process against command.
func argvScore(images [][]string, filename string, command []string, truncated bool) float64 {
	command = stripSPOPrefix(command)
	if len(command) == 0 {
		return 0
	}
	best := 0.0
	for _, argv := range images {
		best = max(best, argvMatch(argv, command, truncated))
	}
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

// stripSPOPrefix undoes the SPO exec webhook's rewrite of command to
// `env SPO_EXEC_REQUEST_UID=<uid> <command...>`.
func stripSPOPrefix(argv []string) []string {
	if len(argv) >= 2 && path.Base(argv[0]) == "env" && strings.HasPrefix(argv[1], vocab.SPOKey+"=") {
		return argv[2:]
	}
	return argv
}
