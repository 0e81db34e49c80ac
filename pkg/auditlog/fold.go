package auditlog

import "slices"

// Covers reports whether stages has every stage of held: a record with
// those stages already knows all that held knew.
func Covers(stages, held []string) bool {
	for _, s := range held {
		if !slices.Contains(stages, s) {
			return false
		}
	}
	return true
}

// Fold merges two snapshots of one request that a consumer met apart: a
// Merger that let the request go (its caps, or an idle bound) sends a later
// stage alone, or an earlier stage comes late. The result is what one
// Merger would have built from both: the snapshot with the later stage wins
// the response code, the end and annotations it names; what only one of
// them knows (a body, the code RequestReceived lacks) is kept. Neither
// argument is changed or shared.
func Fold(held, next *ExecRecord) ExecRecord {
	late, early := next, held
	if topRank(held.Stages) > topRank(next.Stages) {
		late, early = held, next
	}
	out := late.Clone()
	for _, s := range early.Stages {
		if !slices.Contains(out.Stages, s) {
			out.Stages = append(out.Stages, s)
		}
	}
	slices.SortStableFunc(out.Stages, func(a, b string) int { return stageRank(a) - stageRank(b) })
	if out.Code == 0 {
		out.Code = early.Code
	}
	if out.EndTimestamp.IsZero() {
		out.EndTimestamp = early.EndTimestamp
	}
	if out.RequestReceivedTimestamp.IsZero() {
		out.RequestReceivedTimestamp = early.RequestReceivedTimestamp
	}
	if len(out.Command) == 0 {
		out.Command = slices.Clone(early.Command)
	}
	if out.Container == "" {
		out.Container = early.Container
	}
	if len(out.Ports) == 0 {
		out.Ports = slices.Clone(early.Ports)
	}
	if len(out.Env) == 0 {
		out.Env = slices.Clone(early.Env)
	}
	if out.Stdin == nil {
		out.Stdin = cloneBool(early.Stdin)
	}
	if out.TTY == nil {
		out.TTY = cloneBool(early.TTY)
	}
	for k, v := range early.Annotations {
		if _, ok := out.Annotations[k]; !ok {
			if out.Annotations == nil {
				out.Annotations = map[string]string{}
			}
			out.Annotations[k] = v
		}
	}
	if v, ok := out.Annotations[AnnotationDecision]; ok {
		out.Decision = v
	}
	if v, ok := out.Annotations[AnnotationReason]; ok {
		out.Reason = v
	}
	if out.Decision == "" {
		out.Decision = early.Decision
	}
	if out.Reason == "" {
		out.Reason = early.Reason
	}
	for _, f := range early.Flags {
		out.addFlag(f)
	}
	return out
}

// topRank is the rank of the latest stage in stages; -1 for none.
func topRank(stages []string) int {
	r := -1
	for _, s := range stages {
		r = max(r, stageRank(s))
	}
	return r
}
