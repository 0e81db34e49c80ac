package alert

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/store"
	"github.com/execid/correlator/pkg/vocab"
)

// An alert says what was true when it was raised. A later state of its
// process can contradict it: an audit record that reaches the node after
// the pending TTL attributes processes that rules had already judged
// unattributed (no-audit-record, uncovered-exec, a root judged without its
// session). The caller (pkg/agent) asks Resolve which of the alerts raised
// on a process still stand, and hands the resolutions to the same store and
// sinks as the alerts, so that none is silently left standing.

// Resolve returns a resolution for each alert in raised that in, as it is
// now, contradicts: the rule that raised it, evaluated on in, would not
// raise an alert with that ID (the rule is gone, it no longer matches, or
// it matches under another ID, as when the process's session changed).
// Alerts already resolved are skipped. Nothing is counted as a match,
// remembered or suppressed: what in now matches, Evaluate raises.
//
// A resolution is a copy of the alert with Status store.AlertResolved,
// ResolvedAt now, Resolution saying why, and as Payload the process as it
// now is.
func (e *Engine) Resolve(in Input, raised []store.Alert, now time.Time) []store.Alert {
	var out []store.Alert
	var pl json.RawMessage
	encoded := false // once, and only for an input that resolves something
	for _, a := range raised {
		if a.Status == store.AlertResolved {
			continue
		}
		why, ok := e.contradicts(&in, &a)
		if !ok {
			continue
		}
		if !encoded {
			pl, encoded = e.resolutionPayload(&in), true
		}
		r := a
		r.Status, r.ResolvedAt, r.Payload = store.AlertResolved, now.UTC(), pl
		r.Resolution = strings.ToValidUTF8(joinReason(in.change(), why), "\uFFFD")
		e.m.resolutions.WithLabelValues(a.Rule).Inc()
		out = append(out, r)
	}
	return out
}

// resolutionPayload is the process as it now is; nil without one, or if
// it does not encode (the resolution stands without it).
func (e *Engine) resolutionPayload(in *Input) json.RawMessage {
	if in.Process == nil {
		return nil
	}
	b, err := json.Marshal(struct {
		Process *join.Process `json:"process"`
	}{in.Process})
	if err != nil {
		e.log.Error().Err(err).Str("process", in.Process.ProcessID).Msg("encoding resolution payload")
		return nil
	}
	return b
}

// contradicts reports whether in contradicts a, and why.
func (e *Engine) contradicts(in *Input, a *store.Alert) (string, bool) {
	i := slices.IndexFunc(e.rules, func(r Rule) bool { return r.Name == a.Rule })
	if i < 0 {
		return "rule " + a.Rule + " is no longer loaded", true
	}
	r := &e.rules[i]
	mt := matcher{in: in}
	if !r.applies(in) || !mt.match(&r.Match) {
		if gone := r.flagsGone(in); len(gone) > 0 {
			return "it is no longer flagged " + strings.Join(gone, ","), true
		}
		return "it no longer matches rule " + r.Name, true
	}
	id, _, _ := r.key(in, mt.facts)
	if id == a.ID {
		return "", false
	}
	return "rule " + r.Name + " now raises alert " + id + " for it instead", true
}

// flagsGone are the flags r's top-level condition names that in no longer
// carries, to say plainly why a flag rule stopped matching.
func (r *Rule) flagsGone(in *Input) []string {
	if r.Match.Flags == nil {
		return nil
	}
	have := in.flags()
	var gone []string
	for _, f := range slices.Concat(r.Match.Flags.AnyOf, r.Match.Flags.AllOf) {
		if !slices.Contains(have, f) && !slices.Contains(gone, f) {
			gone = append(gone, f)
		}
	}
	return gone
}

// change says what changed the process: a late audit record, where it
// carries one, and what the record said of it.
func (in *Input) change() string {
	p := in.Process
	if p == nil || !slices.Contains(p.Flags, vocab.FlagLateAuditRecord) {
		return ""
	}
	late := "a late audit record (" + strconv.FormatFloat(p.RecordDelay, 'f', -1, 64) + " s after the process started)"
	switch {
	case in.Session != nil:
		return fmt.Sprintf("%s attributed the process to session %s of user %s", late, in.Session.AuditID, displayUser(in.Session))
	case p.AuditID != "":
		return fmt.Sprintf("%s attributed the process to session %s", late, p.AuditID)
	case in.claimed() != nil:
		c := in.claimed()
		return fmt.Sprintf("%s named session %s of user %s, whose ID the process carried without being part of it",
			late, c.AuditID, displayUser(c))
	}
	return late + " answered the process"
}

func joinReason(change, why string) string {
	if change == "" {
		return why
	}
	return change + "; " + why
}
