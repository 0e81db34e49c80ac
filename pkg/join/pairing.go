package join

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strings"
	"time"

	"github.com/execid/correlator/pkg/auditlog"
)

// One request, one root (design.md, join rule 6). An exec request lands
// exactly one runtime-exec'd process in its container, and a root that
// execs in place stays that root. The audit ID is the client's choice
// (kube-apiserver takes the Audit-ID header verbatim), so a second user can
// send a victim's ID with a genuine exec of her own: the runtime then hands
// the victim's ID to her verified root. The pairing below decides which
// request each verified root under one ID can belong to, so that such a
// root never borrows the first request's user.

// maxPairings bounds the assignments pairRoots enumerates; past it every
// root that fits more than one request is ambiguous.
const maxPairings = 20_000

// maxRootsPerID bounds the verified roots remembered under one audit ID.
// Each is a genuine, audited exec; more than this under one ID is an attack
// or a broken client, and the excess roots are never attributed.
const maxRootsPerID = 64

// rootInfo is what the pairing needs of a verified root. It outlives the
// root's process entry: a root that exited and left memory still holds its
// request, so a later root cannot take it.
type rootInfo struct {
	start                         time.Time
	containerID, ns, pod, ctrName string
	// bridge is the root's exec bridge ID (prefixed): it fits only the
	// request the bridge annotated with it.
	bridge string
	// ephemeral: the root is a debug container's init (ephemeralInit),
	// which only its own pods/ephemeralcontainers request can start.
	ephemeral bool
}

// pairing is the outcome for one audit ID: a session key per request and
// an outcome per verified root.
type pairing struct {
	keys []string // session key of rs.recs[i]
	// roots is the outcome per root; the common single root is held in
	// oneID and one instead, without a map's few hundred bytes.
	roots map[string]rootOutcome
	oneID string
	one   rootOutcome
	taken []bool // rs.recs[i] is held by a root, exactly or not
	// unseen: the merger saw another request under the ID that is not
	// held here, so no root can be paired exactly.
	unseen bool
}

// setRoots files the outcomes of pairRoots.
func (pr *pairing) setRoots(roots map[string]rootOutcome) {
	if len(roots) != 1 {
		pr.roots = roots
		return
	}
	for id, o := range roots {
		pr.oneID, pr.one = id, o
	}
}

// outcome returns what the pairing says of root rid, if it is one.
func (pr *pairing) outcome(rid string) (rootOutcome, bool) {
	if pr.oneID != "" {
		return pr.one, rid == pr.oneID
	}
	o, ok := pr.roots[rid]
	return o, ok
}

// nroots is the number of roots paired.
func (pr *pairing) nroots() int {
	if pr.oneID != "" {
		return 1
	}
	return len(pr.roots)
}

// rootOutcome is what the pairing says of one verified root.
type rootOutcome struct {
	req    int   // the request it holds exactly, or -1
	cands  []int // several requests fit it: ambiguous
	reused bool  // requests it fits came before it, all held by other roots
	// bound: the root's bridge ID names its request, so a request under the
	// ID that is not held yet (pairing.unseen) cannot be its own.
	bound bool
}

// sessionKey names request i of an audit ID's requests: the first (by
// requestReceived, then request key) keeps the audit ID, any other request
// that reused the ID gets the ID, "~" and a hash of its own request key, so
// that each user's session is a row of its own.
func sessionKey(id string, rec *auditlog.ExecRecord, first bool) string {
	if first {
		return id
	}
	sum := sha256.Sum256([]byte(requestKey(rec)))
	return id + "~" + hex.EncodeToString(sum[:6])
}

// keys returns the session key of each request of rs; the caller must not
// change the slice. They are made once per change of rs.recs.
func (rs *recSet) keys() []string {
	if len(rs.keyCache) == len(rs.recs) {
		return rs.keyCache
	}
	out := make([]string, len(rs.recs))
	for i, r := range rs.recs {
		out[i] = sessionKey(rs.id, r, i == 0)
	}
	rs.keyCache = out
	return out
}

// baseID returns the audit ID of a session key and whether it was derived.
func baseID(key string) (string, bool) {
	if i := strings.LastIndexByte(key, '~'); i > 0 && len(key)-i == 13 {
		return key[:i], true
	}
	return key, false
}

// pairable reports whether a request can have started a root: an exec (or
// the ephemeral container of kubectl debug) that was allowed.
func pairable(rec *auditlog.ExecRecord) bool {
	if rec.Subresource == auditlog.SubresourceAttach || outcome(rec) != "" {
		return false
	}
	return true
}

// fits reports whether root ri can have been started by rec: the same pod
// and container where both sides name them, started no earlier than the
// request was received (less the clock skew) and no later than it ended.
func fits(ri *rootInfo, rec *auditlog.ExecRecord, skew time.Duration) bool {
	if !pairable(rec) || differ(ri.ns, rec.Namespace) || differ(ri.pod, rec.Pod) || differ(ri.ctrName, rec.Container) {
		return false
	}
	if ri.bridge != "" && !hasBridge(rec, ri.bridge) {
		return false
	}
	// An exec's root is the `env` the runtime exec'd; a debug container's
	// is its init, and the request must name that very container.
	if eph := rec.Subresource == auditlog.SubresourceEphemeralContainers; ri.ephemeral != eph ||
		(eph && (rec.Container == "" || rec.Container != ri.ctrName)) {
		return false
	}
	if rr := rec.RequestReceivedTimestamp; !rr.IsZero() && !ri.start.IsZero() && ri.start.Before(rr.Add(-skew)) {
		return false
	}
	// The kubelet starts a debug container after its request has
	// completed, as soon as it syncs the pod (an image pull can take
	// minutes): only the container's name, unique in the pod, binds it.
	if end := rec.EndTimestamp; !end.IsZero() && !ri.start.IsZero() && !ri.ephemeral && ri.start.After(end.Add(skew)) {
		return false
	}
	return true
}

// pairRoots assigns roots to requests. An assignment gives each root at
// most one request it fits and each request at most one root; the valid
// ones hold as many roots as any can, and are first come, first served: no
// root left out started before a held root whose request it also fits. A
// root is exact when every valid assignment gives it the same request,
// ambiguous when they differ, and reused when none gives it one although a
// request it fits in pod and time exists.
func pairRoots(recs []*auditlog.ExecRecord, roots map[string]*rootInfo, skew time.Duration) (map[string]rootOutcome, []bool) {
	if len(roots) == 1 {
		return pairOne(recs, roots, skew)
	}
	ids := make([]string, 0, len(roots))
	for id := range roots {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, func(a, b string) int {
		if c := roots[a].start.Compare(roots[b].start); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	fit, after := make([][]bool, len(ids)), make([][]bool, len(ids))
	for i, id := range ids {
		ri := roots[id]
		fit[i], after[i] = make([]bool, len(recs)), make([]bool, len(recs))
		for q, rec := range recs {
			fit[i][q] = fits(ri, rec, skew)
			after[i][q] = fit[i][q] && !ri.start.Before(rec.RequestReceivedTimestamp)
		}
	}
	e := enumerator{fit: fit, after: after, ids: ids, roots: roots, nreq: len(recs)}
	e.run()
	out := make(map[string]rootOutcome, len(ids))
	taken := make([]bool, len(recs))
	for i, id := range ids {
		ri := roots[id]
		o := rootOutcome{req: -1, bound: ri.bridge != ""}
		seen := e.seen[i]
		switch {
		case e.over:
			o.cands = fitting(fit[i])
			if len(o.cands) == 1 && e.onlyFit(i, o.cands[0]) {
				o.req, o.cands = o.cands[0], nil
			}
		case len(seen) == 1 && seen[0] >= 0:
			o.req = seen[0]
		case len(seen) == 1:
			o.reused = cameBefore(ri, recs, skew)
		default:
			o.cands = slices.DeleteFunc(slices.Clone(seen), func(q int) bool { return q < 0 })
		}
		if o.req >= 0 {
			taken[o.req] = true
		}
		for _, q := range o.cands {
			taken[q] = true
		}
		out[id] = o
	}
	return out, taken
}

// cameBefore reports whether an allowed request of ri's pod was received
// before ri started: a root no request is left for is then one that reused
// the ID, not one whose own request is still to come.
func cameBefore(ri *rootInfo, recs []*auditlog.ExecRecord, skew time.Duration) bool {
	for _, rec := range recs {
		if !pairable(rec) || differ(ri.ns, rec.Namespace) || differ(ri.pod, rec.Pod) || differ(ri.ctrName, rec.Container) {
			continue
		}
		if rr := rec.RequestReceivedTimestamp; rr.IsZero() || ri.start.IsZero() || !ri.start.Before(rr.Add(-skew)) {
			return true
		}
	}
	return false
}

// pairOne is pairRoots for a single root, the common case: every request
// it fits is a valid pairing of its own.
func pairOne(recs []*auditlog.ExecRecord, roots map[string]*rootInfo, skew time.Duration) (map[string]rootOutcome, []bool) {
	taken := make([]bool, len(recs))
	for id, ri := range roots {
		o := rootOutcome{req: -1, bound: ri.bridge != ""}
		for q, rec := range recs {
			if fits(ri, rec, skew) {
				o.cands = append(o.cands, q)
				taken[q] = true
			}
		}
		switch len(o.cands) {
		case 0:
			o.reused = cameBefore(ri, recs, skew)
		case 1:
			o.req, o.cands = o.cands[0], nil
		}
		return map[string]rootOutcome{id: o}, taken
	}
	return nil, taken
}

func fitting(row []bool) []int {
	var out []int
	for q, ok := range row {
		if ok {
			out = append(out, q)
		}
	}
	return out
}

// enumerator walks every assignment of roots (in start order) to requests.
type enumerator struct {
	fit   [][]bool
	after [][]bool // fit, and started after the request by the node's clock
	ids   []string
	roots map[string]*rootInfo
	nreq  int

	cur   []int   // request of root i, or -1
	used  []bool  // request q is held in cur
	best  int     // most roots held by any assignment
	valid [][]int // assignments holding best roots, first come first served
	steps int
	over  bool    // maxPairings passed: the answer is coarse
	seen  [][]int // per root: requests it holds across valid ones (-1: none)
}

func (e *enumerator) run() {
	e.cur, e.used = make([]int, len(e.ids)), make([]bool, e.nreq)
	e.walk(0, 0)
	e.seen = make([][]int, len(e.ids))
	for _, a := range e.valid {
		if a == nil || len(e.held(a)) != e.best || !e.firstCome(a) {
			continue
		}
		for i, q := range a {
			if !slices.Contains(e.seen[i], q) {
				e.seen[i] = append(e.seen[i], q)
			}
		}
	}
	for i := range e.seen {
		slices.Sort(e.seen[i])
	}
}

func (e *enumerator) walk(i, n int) {
	if e.over {
		return
	}
	if e.steps++; e.steps > maxPairings {
		e.over = true
		return
	}
	if i == len(e.ids) {
		if n < e.best {
			return
		}
		if n > e.best {
			e.best, e.valid = n, e.valid[:0]
		}
		e.valid = append(e.valid, slices.Clone(e.cur))
		return
	}
	for q := range e.nreq {
		if e.fit[i][q] && !e.used[q] {
			e.cur[i], e.used[q] = q, true
			e.walk(i+1, n+1)
			e.used[q] = false
		}
	}
	e.cur[i] = -1
	e.walk(i+1, n)
}

func (e *enumerator) held(a []int) []int {
	var out []int
	for _, q := range a {
		if q >= 0 {
			out = append(out, q)
		}
	}
	return out
}

// firstCome rejects an assignment that leaves out a root which started
// before a held root and after that root's request was received. A root
// that started before the request by the node's clock fits it only through
// the clock skew: it may be the session whose ID the request reused (its
// own request not logged), so it does not come first.
func (e *enumerator) firstCome(a []int) bool {
	for u, qu := range a {
		if qu >= 0 {
			continue
		}
		for m, qm := range a {
			if qm >= 0 && e.after[u][qm] && e.roots[e.ids[u]].start.Before(e.roots[e.ids[m]].start) {
				return false
			}
		}
	}
	return true
}

// onlyFit reports whether root i is the only root that fits request q, so
// that it holds q exactly even when the enumeration was cut short.
func (e *enumerator) onlyFit(i, q int) bool {
	for k := range e.fit {
		if k != i && e.fit[k][q] {
			return false
		}
	}
	return true
}
