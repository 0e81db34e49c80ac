package join

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"github.com/execid/correlator/pkg/auditlog"
	"github.com/execid/correlator/pkg/vocab"
)

// recSet is one audit ID's request(s): more than one means a conflict.
type recSet struct {
	id      string
	recs    []*auditlog.ExecRecord // ordered by requestReceived, then request key
	seq     uint64
	touched time.Time
	recheck time.Time // the expiry tick asks live() again from then on
	pods    []string  // namespace/pod keys of its requests
	slots   []slotKey // their recsPod keys: pod and requestReceived's window
	spo     []string  // SPO UIDs indexed in spo
	members *pset     // processes attributed to it; made on the first
	denied  bool      // every request refused: counted in MaxDeniedRecords
	spares  int       // times passed over by eviction since its last stage
	// keyCache holds keys(); storeRecord clears it when recs change.
	keyCache []string
}

func (rs *recSet) conflict() bool {
	if len(rs.recs) > 1 {
		return true
	}
	return len(rs.recs) == 1 && rs.recs[0].HasFlag(vocab.FlagAuditIDConflict)
}

// idless reports whether rs holds a request that came without an audit ID:
// its key is synthetic, and nobody can carry it legitimately.
func (rs *recSet) idless() bool {
	for _, r := range rs.recs {
		if r.HasFlag(vocab.FlagMissingAuditID) {
			return true
		}
	}
	return false
}

// withFlag returns flags with f added once, sorted, without touching the
// caller's slice.
func withFlag(flags []string, f string) []string {
	if slices.Contains(flags, f) {
		return flags
	}
	out := append(slices.Clone(flags), f)
	slices.Sort(out)
	return out
}

// requestKey tells two requests sharing an audit ID apart, as the Merger
// does; the container and command count too, since a GKE record has no
// request URI and names them only in its logged request body.
func requestKey(r *auditlog.ExecRecord) string {
	return strings.Join(append([]string{r.RequestURI, r.Verb, r.User.Username, r.Namespace, r.Pod, r.Subresource,
		r.Container}, r.Command...), "\x00")
}

// storeRecord files rec; it reports false for a stale snapshot.
func (j *Joiner) storeRecord(now time.Time, rec *auditlog.ExecRecord) bool {
	rs := j.recs[rec.AuditID]
	if rs == nil {
		j.seq++
		rs = &recSet{id: rec.AuditID, seq: j.seq}
		j.recs[rec.AuditID] = rs
		j.recq.push(rec.AuditID, rs.seq, now)
	}
	c := ownRecord(rec)
	key := requestKey(c)
	i := slices.IndexFunc(rs.recs, func(r *auditlog.ExecRecord) bool { return requestKey(r) == key })
	switch {
	case i < 0:
		j.holdRecord(c)
		rs.recs = append(rs.recs, c)
	case staleStages(c.Stages, rs.recs[i].Stages):
		return false
	default:
		// A stage merger that let the request go (a bound, or its idle
		// time) sends a later stage alone, or an earlier one comes late:
		// fold what both know.
		if !auditlog.Covers(c.Stages, rs.recs[i].Stages) {
			f := auditlog.Fold(rs.recs[i], c)
			c = &f
		}
		j.holdRecord(c)
		j.releaseRecord(rs.recs[i])
		rs.recs[i] = c
	}
	rs.keyCache = nil
	j.recsVersion++
	slices.SortFunc(rs.recs, func(a, b *auditlog.ExecRecord) int {
		if c := a.RequestReceivedTimestamp.Compare(b.RequestReceivedTimestamp); c != 0 {
			return c
		}
		return strings.Compare(requestKey(a), requestKey(b))
	})
	if now.After(rs.touched) {
		rs.touched = now
	}
	rs.spares = 0
	j.markRefused(rs, now)
	j.reindexRecord(rs)
	delete(j.pairs, rs.id)
	return true
}

// staleStages reports whether next is a strict subset of held.
func staleStages(next, held []string) bool {
	if len(next) >= len(held) {
		return false
	}
	for _, s := range next {
		if !slices.Contains(held, s) {
			return false
		}
	}
	return true
}

// reindexRecord refreshes the pod and SPO indexes of rs, scheduling the
// processes that looked at the old entries.
func (j *Joiner) reindexRecord(rs *recSet) {
	var pods, spo []string
	var slots []slotKey
	for _, r := range rs.recs {
		if pk := podKey(r.Namespace, r.Pod); pk != "" {
			pods = append(pods, pk)
			if rr := r.RequestReceivedTimestamp; !rr.IsZero() {
				slots = append(slots, slotKey{pk, slotOf(rr, j.cfg.HeuristicWindow)})
			}
		}
		spo = append(spo, spoValues(r.Annotations)...)
		spo = append(spo, bridgeValues(r.Annotations)...)
	}
	slices.Sort(pods)
	pods = slices.Compact(pods)
	slices.SortFunc(slots, func(a, b slotKey) int { return cmp.Or(strings.Compare(a.pod, b.pod), cmp.Compare(a.n, b.n)) })
	slots = slices.Compact(slots)
	slices.Sort(spo)
	spo = slices.Compact(spo)
	if !slices.Equal(pods, rs.pods) || !slices.Equal(spo, rs.spo) || !slices.Equal(slots, rs.slots) {
		j.enqueueRecord(rs.id) // what the old entries reached
		j.unindexRecord(rs)
		rs.pods, rs.spo, rs.slots = pods, spo, slots
		for _, k := range slots {
			addTo(j.recsPod, k, rs.id)
		}
		for _, v := range spo {
			ids := j.spo[v]
			if !slices.Contains(ids, rs.id) {
				ids = append(ids, rs.id)
				slices.Sort(ids)
				j.spo[v] = ids
			}
		}
	}
}

// slotOf is t's window of width w: the records an ID-less root started at
// t can score (score: requestReceived within w of t) are in its slot and
// the two beside it, not among the pod's hour of records held for late
// ones.
func slotOf(t time.Time, w time.Duration) int64 {
	n, d := t.UnixNano(), max(int64(w), 1)
	if n < 0 {
		return (n - d + 1) / d
	}
	return n / d
}

// slotKey is a pod and a slot of time (slotOf).
type slotKey struct {
	pod string
	n   int64
}

func (j *Joiner) unindexRecord(rs *recSet) {
	for _, k := range rs.slots {
		removeFrom(j.recsPod, k, rs.id)
	}
	for _, v := range rs.spo {
		ids := slices.DeleteFunc(j.spo[v], func(s string) bool { return s == rs.id })
		if len(ids) == 0 {
			delete(j.spo, v)
		} else {
			j.spo[v] = ids
		}
	}
}

// spoValues returns the request UIDs the Security Profiles Operator's exec
// webhook annotated. The webhook returns AuditAnnotations
// {"SPO_EXEC_REQUEST_UID": req.UID} (kubernetes-sigs/security-profiles-operator,
// internal/pkg/webhooks/execmetadata/execmetadata.go, Handle), and the
// apiserver's mutating dispatcher stores each under "<webhook name>/<key>"
// (k8s.io/apiserver pkg/admission/plugin/webhook/mutating/dispatcher.go), so
// the audit event carries "execmetadata.spo.io/SPO_EXEC_REQUEST_UID" (or
// "nodedebuggingpod.spo.io/..." for node debugging pods).
func spoValues(ann map[string]string) []string {
	var out []string
	for k, v := range ann {
		if v != "" && (k == vocab.SPOKey || strings.HasSuffix(k, "/"+vocab.SPOKey)) {
			out = append(out, v)
		}
	}
	return out
}

// bridgePrefix marks a bridge ID in the SPO indexes (j.spo, j.spoProcs,
// rs.spo) and in j.roots, apart from SPO UIDs and audit IDs.
const bridgePrefix = "bridge\x00"

// bridgeValues returns the IDs correlator's exec bridge annotated, as the
// apiserver stores them: "<webhook name>/<key>" (vocab.BridgeWebhookName).
func bridgeValues(ann map[string]string) []string {
	var out []string
	for k, v := range ann {
		if v != "" && (k == vocab.BridgeKey || strings.HasSuffix(k, "/"+vocab.BridgeKey)) {
			out = append(out, bridgePrefix+v)
		}
	}
	return out
}

// hasBridge reports whether rec's annotations name bridge ID key (prefixed).
func hasBridge(rec *auditlog.ExecRecord, key string) bool {
	return slices.Contains(bridgeValues(rec.Annotations), key)
}

// dropRecord forgets a record. Processes attributed to it keep their
// answer (the store has it); new ones carrying its ID wait again.
func (j *Joiner) dropRecord(id string) {
	rs := j.recs[id]
	if rs == nil {
		return
	}
	j.unindexRecord(rs)
	for _, r := range rs.recs {
		j.releaseRecord(r)
	}
	if rs.denied {
		j.denied--
	}
	j.noteEnded(rs)
	delete(j.recs, id)
	delete(j.pairs, id)
	j.forgetRoots(id)
	j.recsVersion++
}

// RecordsVersion changes whenever a record is stored, replaced or
// forgotten: what Session returns for any key is the same while it does
// not, so a caller may keep Session's answers until it moves.
func (j *Joiner) RecordsVersion() uint64 { return j.recsVersion }

// ownRecord starts the joiner's copy of r: what the interner shares
// (holdRecord) is still the caller's until then, the rest is copied.
func ownRecord(r *auditlog.ExecRecord) *auditlog.ExecRecord {
	c := *r
	c.Command, c.Env, c.Ports = slices.Clone(r.Command), slices.Clone(r.Env), slices.Clone(r.Ports)
	c.User.Extra = cloneExtra(r.User.Extra)
	if u := r.ImpersonatedUser; u != nil {
		cu := *u
		cu.Extra = cloneExtra(u.Extra)
		c.ImpersonatedUser = &cu
	}
	return &c
}

func cloneExtra(m map[string][]string) map[string][]string {
	if m == nil {
		return nil
	}
	out := make(map[string][]string, len(m))
	for k, v := range m {
		out[k] = slices.Clone(v)
	}
	return out
}

// cloneRecord keeps the joiner's copy apart from the caller's.
func cloneRecord(r *auditlog.ExecRecord) *auditlog.ExecRecord {
	c := r.Clone()
	return &c
}

// outputs renders one session per request: a request that reused the ID
// of another is a session of its own (sessionKey), listing the others.
func (rs *recSet) outputs() []Session {
	keys := rs.keys()
	out := make([]Session, len(rs.recs))
	for i := range rs.recs {
		out[i] = rs.output(i, keys[i])
	}
	return out
}

// output renders request i as session key.
func (rs *recSet) output(i int, key string) Session {
	s := Session{ExecRecord: *cloneRecord(rs.recs[i])}
	s.AuditID = key
	if v := spoValues(s.Annotations); len(v) > 0 {
		slices.Sort(v)
		s.SPOExecRequestUID = v[0]
	}
	if s.Stages == nil {
		s.Stages = []string{}
	}
	for k, o := range rs.recs {
		if k != i {
			s.Conflicts = append(s.Conflicts, *cloneRecord(o))
		}
	}
	if rs.conflict() && !slices.Contains(s.Flags, vocab.FlagAuditIDConflict) {
		s.Flags = append(s.Flags, vocab.FlagAuditIDConflict)
		slices.Sort(s.Flags)
	}
	if s.Flags == nil {
		s.Flags = []string{}
	}
	return s
}

// recOf returns the requests a session key belongs to.
func (j *Joiner) recOf(key string) *recSet {
	if rs := j.recs[key]; rs != nil {
		return rs
	}
	if base, derived := baseID(key); derived {
		return j.recs[base]
	}
	return nil
}

// enqueueRecord schedules everything a change to record id can affect.
func (j *Joiner) enqueueRecord(id string) {
	if st := j.ids[id]; st != nil {
		for p := range st.procs.all() {
			j.enqueue(p.in.ProcessID)
		}
	}
	rs := j.recs[id]
	if rs == nil {
		return
	}
	for _, v := range rs.spo {
		for p := range j.spoProcs[v].all() {
			j.enqueue(p.in.ProcessID)
		}
	}
	for _, pk := range rs.pods {
		j.enqueueRootsNear(pk, rs, "")
	}
}
