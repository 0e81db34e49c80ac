package join

import "time"

// The pending set (Joiner.pending) holds the processes whose answer may
// still change on its own (Process.Pending), each with the end of its
// pending TTL at the latest; Expire ends the waits that reach the TTL.

// track keeps the pending set and the exec-root index in step with a result.
func (j *Joiner) track(p *proc, res result) {
	id := p.in.ProcessID
	if res.waiting && !p.expired {
		if _, ok := j.pending[id]; !ok {
			// The wait's end at the latest (pendingUntil): the TTL
			// counts from when p was taken in, at or before now.
			j.pending[id] = qtime(j.now.Add(j.cfg.PendingTTL))
			if len(j.pending) > j.cfg.MaxPending {
				j.expireOldest()
			}
		}
	} else {
		delete(j.pending, id)
	}
	// An exec root stays indexed past its wait, while it is held: a record
	// later than the TTL still re-decides it (late.go).
	pk := ""
	if res.execRoot {
		pk = podKey(p.in.Namespace, p.in.Pod)
	}
	j.setRoot(p, pk)
	if !res.execRoot && p.held() != "" {
		// No longer an exec root (its parent came): it holds nothing.
		j.setHeld(p, podKey(p.in.Namespace, p.in.Pod), nil, false)
	}
}

// pendingUntil is when pending p's wait ends at the latest: the pending
// TTL from when it began waiting (it is expired by then, at the next
// Expire), or sooner for an ID-less root whose heuristic answer waits for
// its window (windowed): a request that fits it was received by
// start+W, and the roots that could contend for that request have all
// settled 2W + AuditLag after it (holdsDeadline). A root that no request
// fits once its window closed waits out the TTL.
func (j *Joiner) pendingUntil(p *proc) time.Time {
	until := j.now.Add(j.cfg.PendingTTL)
	if t, ok := j.pending[p.in.ProcessID]; ok {
		until = time.Unix(0, t)
	}
	if p.res.windowed {
		if w := p.startTime().Add(3*j.cfg.HeuristicWindow + j.cfg.AuditLag); w.Before(until) {
			until = w
		}
	}
	return until.UTC()
}
