package join

import (
	"slices"
	"time"
)

// RestoreProcesses takes back processes the store kept unattributed, which
// an agent restart forgot, so that a record later than the restart still
// attributes them on the same data (late.go). Each is held as it was
// stored, its wait over, until Config.LateWindow after its start. Only
// exec sessions' processes are taken (sessionProc: a key carried, an
// ID-less exec root, a descendant of either among those restored); one
// already held, or past the window, is skipped, as is a row written
// before the stores kept the evidence (it carries a claimed ID but no
// evidence: joining a guess could frame someone). A row is handed out
// again only if what is held now changes its answer.
func (j *Joiner) RestoreProcesses(now time.Time, stored []Process) []Update {
	j.advance(now)
	if j.cfg.LateWindow <= 0 {
		return nil
	}
	byID := make(map[string]*Process, len(stored))
	for i := range stored {
		if p := &stored[i]; p.ProcessID != "" {
			byID[p.ProcessID] = p
		}
	}
	taken := map[string]*Process{}
	// Parents before children where both are stored, whatever the order
	// (lists are newest first): a child is a session's if its parent is.
	var take func(p *Process, depth int) bool
	take = func(p *Process, depth int) bool {
		if _, ok := taken[p.ProcessID]; ok {
			return true
		}
		if !restorable(p, now, j.cfg.LateWindow) || j.procs.get(p.ProcessID) != nil {
			return false
		}
		par := byID[p.ParentProcessID]
		parentTaken := par != nil && par != p && depth > 0 && par.ContainerID == p.ContainerID && take(par, depth-1)
		if !parentTaken && !carriesKey(p) && !p.ExecOrigin.Verified() {
			return false
		}
		taken[p.ProcessID] = p
		j.restore(now, p)
		return true
	}
	for i := range stored {
		take(&stored[i], 16)
	}
	if len(taken) == 0 {
		return nil
	}
	j.settle()
	for id, was := range taken {
		if p := j.procs.get(id); p != nil && sameAnswer(j.output(p), was, now) {
			delete(j.dirtyProcs, id)
		}
	}
	j.evictProcesses()
	j.compactQueues()
	return j.flush()
}

// restore holds one stored process, its wait over.
func (j *Joiner) restore(now time.Time, in *Process) {
	j.seq++
	p := &proc{seq: j.seq, res: noResult, expired: true}
	j.own(p, in)
	j.procs.put(p)
	j.procq.push(in.ProcessID, j.seq, now)
	if !in.Exit.IsZero() {
		code := 0
		if in.ExitCode != nil {
			code = *in.ExitCode
		}
		p.setExit(Exit{ProcessID: in.ProcessID, Time: in.Exit, Code: code})
	}
	j.lateq.push(qent{id: in.ProcessID, seq: p.seq, t: qtime(p.startTime().Add(j.cfg.LateWindow))})
	j.sizeProc(p)
	j.index(p)
	j.enqueue(in.ProcessID)
	for d := range j.deps[in.ProcessID].all() {
		j.enqueue(d.in.ProcessID)
	}
	j.stats.Restored++
}

// restorable: a stored row the joiner can take back at now.
func restorable(p *Process, now time.Time, window time.Duration) bool {
	if p.Attribution.Counted() || (p.ContainerID == "" && p.Pod == "") {
		return false
	}
	start := p.Start
	if start.IsZero() {
		start = p.ExecTime
	}
	if start.IsZero() || !now.Before(start.Add(window)) {
		return false
	}
	// A row from before the stores kept the evidence names an ID it
	// carried (or one it was matched to: the row does not say which).
	return carriesKey(p) || p.ClaimedAuditID == "" && p.SPOExecRequestUID == ""
}

func carriesKey(p *Process) bool {
	return p.Captured.Value != "" || p.Bridge.Value != "" || p.SPO.Value != ""
}

// sameAnswer compares what the joiner decides of a process, and whether
// it waits at now: a row stored while its process waited, its deadline
// still to come, says so, and a restored process's wait is over.
func sameAnswer(a Process, b *Process, now time.Time) bool {
	return a.Attribution == b.Attribution && a.AuditID == b.AuditID && a.ClaimedAuditID == b.ClaimedAuditID &&
		slices.Equal(a.Candidates, b.Candidates) && slices.Equal(normFlags(a.Flags), normFlags(b.Flags)) &&
		!b.PendingUntil.After(now)
}

func normFlags(f []string) []string {
	f = slices.Clone(f)
	slices.Sort(f)
	return slices.Compact(f)
}
