package join

import (
	"time"

	"github.com/execid/correlator/pkg/auditlog"
)

// The joiner's memory is bounded by counts and by estimated bytes, so that
// neither many records nor large ones (a command in a megabyte URI) can
// outgrow a pod's limit. What is shed is counted in Stats; records come
// back through the agent's lookup when a process names them again.

// Rough heap costs of a held record beyond its strings: the ExecRecord, the
// recSet, their map slots and queue entries.
const (
	recordFixedBytes = 448 + 256 + 160
	sliceBytes       = 24
	stringBytes      = 16
	mapBytes         = 48
)

// RecordBytes estimates the heap one unshared copy of r holds: what a
// byte bound on records (the joiner's, or the agent's on its stage merger)
// charges for it.
func RecordBytes(r *auditlog.ExecRecord) int { return recordBytes(r, false) }

// recordBytes estimates r's heap; shared leaves out what the interner
// holds (and charges to itself).
func recordBytes(r *auditlog.ExecRecord, shared bool) int {
	n := recordFixedBytes + len(r.AuditID) + len(r.RequestURI)
	n += listBytes(r.Command) + listBytes(r.Env) + listBytes(r.Ports)
	for _, s := range sharedStrings(r) {
		if !shared || keyLen(*s) > internMaxLen {
			n += len(*s)
		}
	}
	for _, l := range sharedLists(r) {
		if !shared || keyLen(*l...) > internMaxLen {
			n += listBytes(*l)
		}
	}
	if r.ImpersonatedUser != nil {
		n += 64 + extraBytes(r.ImpersonatedUser.Extra)
	}
	n += extraBytes(r.User.Extra)
	if len(r.Annotations) > 0 && (!shared || keyLen(annParts(r.Annotations)...) > internMaxLen) {
		n += mapBytes
		for k, v := range r.Annotations {
			n += internPairBytes + len(k) + len(v)
		}
	}
	return n
}

func listBytes(l []string) int {
	if l == nil {
		return 0
	}
	n := sliceBytes + stringBytes*len(l)
	for _, s := range l {
		n += len(s)
	}
	return n
}

func extraBytes(m map[string][]string) int {
	if m == nil {
		return 0
	}
	n := mapBytes
	for k, v := range m {
		n += internPairBytes + len(k) + listBytes(v)
	}
	return n
}

// maxSpares is how many times eviction passes over a record in use before
// it goes too: a flood sheds idle records first, and only one this many
// times the bound can push out a session with running processes (the
// agent's lookup brings it back when a process names it again).
const maxSpares = 64

// procFixedBytes is a held process's heap beyond its strings: the proc
// (144) and its slots in the maps, sets and queue that index it (measured
// by BenchmarkJoinLiveProcesses at 100 a session: procs 21, queue 37,
// deps 13, its ID's carriers 15, its session's members 12; sets of few
// cost more a process).
const procFixedBytes = 144 + 112

// procRareBytes is a procRare's heap.
const procRareBytes = 112

// procBytes estimates what p holds, less what it shares (j.shares,
// j.results, j.images: they charge themselves).
func procBytes(p *proc) int {
	in := &p.in
	n := procFixedBytes + len(in.ProcessID) + len(in.ParentProcessID)
	n += in.ownBytes() // an image too long to share (j.images)
	if p.exit != nil {
		n += 32 + 2*32 // exitInfo, and its exitq and doneq entries
	}
	if p.rare != nil {
		n += procRareBytes + listBytes(p.rare.first) + len(p.rare.held)
	}
	return n
}

// sizeProc re-estimates p after it changed.
func (j *Joiner) sizeProc(p *proc) {
	n := procBytes(p)
	j.procBytes += n - int(p.size)
	p.size = int32(n)
}

// evictProcesses enforces MaxProcesses and MaxProcessBytes, oldest first.
func (j *Joiner) evictProcesses() {
	for j.procs.len() > j.cfg.MaxProcesses || j.procsBytes() > j.cfg.MaxProcessBytes {
		e, ok := j.procq.peek(evictHead)
		if !ok {
			return
		}
		j.procq.pop(evictHead)
		if p := j.procs.get(e.id); p != nil && p.seq == e.seq {
			j.stats.EvictedProcesses++
			if p.expired {
				j.forgetLate(p) // its wait over, yet a late record could still answer it
			}
			j.removeProc(p)
		}
	}
}

// holdRecord makes r (from ownRecord) the joiner's, sharing its repeated
// fields and charging the rest to the record bound.
func (j *Joiner) holdRecord(r *auditlog.ExecRecord) {
	j.intern.record(r)
	j.recBytes += recordBytes(r, true)
}

// releaseRecord undoes holdRecord.
func (j *Joiner) releaseRecord(r *auditlog.ExecRecord) {
	j.intern.releaseRecord(r)
	j.recBytes -= recordBytes(r, true)
}

// refused reports whether every request under rs was refused or failed:
// such a record attributes nothing, and is read only if its ID turns up
// on a process (a replay, flagged denied_exec).
func (rs *recSet) refused() bool {
	for _, r := range rs.recs {
		if outcome(r) == "" {
			return false
		}
	}
	return len(rs.recs) > 0
}

// markRefused keeps the count and queue of refused records in step.
func (j *Joiner) markRefused(rs *recSet, now time.Time) {
	refused := rs.refused()
	if refused == rs.denied {
		return
	}
	rs.denied = refused
	if refused {
		j.denied++
		j.deniedq.push(rs.id, rs.seq, now)
	} else {
		j.denied--
	}
}

// recordsOver reports whether the records exceed their bounds.
func (j *Joiner) recordsOver() bool {
	return len(j.recs) > j.cfg.MaxRecords || j.recBytes+j.intern.bytes > j.cfg.MaxRecordBytes
}

// evictRecords enforces MaxDeniedRecords, then MaxRecords and
// MaxRecordBytes, oldest first. Refused records go first, so a flood of
// denied execs (which anyone authenticated can cause) only churns its own
// small set. A record a running process still reads is passed over.
func (j *Joiner) evictRecords() {
	for j.denied > j.cfg.MaxDeniedRecords {
		e, ok := j.deniedq.peek()
		if !ok {
			break
		}
		j.deniedq.pop()
		if rs := j.recs[e.id]; rs != nil && rs.seq == e.seq && rs.denied && !j.spare(rs, &j.deniedq, e) {
			j.stats.EvictedDenied++
			j.dropRecord(e.id)
		}
	}
	for j.recordsOver() {
		e, ok := j.recq.peek()
		if !ok {
			return
		}
		j.recq.pop()
		if rs := j.recs[e.id]; rs != nil && rs.seq == e.seq && !j.spare(rs, &j.recq, e) {
			if rs.denied {
				j.stats.EvictedDenied++
			} else {
				j.stats.EvictedRecords++
			}
			j.dropRecord(e.id)
		}
	}
}

// spare requeues a record that a running process still carries or is
// attributed to, up to maxSpares times per arrival of a stage: the bound
// sheds idle records before the ones in use.
func (j *Joiner) spare(rs *recSet, q *queue, e qent) bool {
	if rs.spares >= maxSpares || !j.live(rs) {
		return false
	}
	rs.spares++
	q.requeue(e)
	return true
}
