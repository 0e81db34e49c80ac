package store

import "github.com/execid/correlator/pkg/join"

// pending is the open batch, collapsing rows with the same key. A process
// is in b.Processes or in b.Exits, never both: procs maps its ID to its
// index in Processes, or to -1-index in Exits.
type pending struct {
	rows     int
	waiters  []chan<- error
	b        Batch
	sessions map[string]int
	procs    map[string]int
}

// add merges b into the open batch. With whole, b's Exits are taken as
// whole rows (Processes): the writer lost rows, so a stored row may be
// older than the one an exit follows.
func (p *pending) add(b Batch, whole bool) {
	if p.sessions == nil {
		p.sessions, p.procs = map[string]int{}, map[string]int{}
	}
	for _, s := range b.Sessions {
		if i, ok := p.sessions[s.AuditID]; ok {
			p.b.Sessions[i] = s
			continue
		}
		p.sessions[s.AuditID] = len(p.b.Sessions)
		p.b.Sessions = append(p.b.Sessions, s)
		p.rows++
	}
	for i := range b.Processes {
		p.addProcess(&b.Processes[i])
	}
	for i := range b.Exits {
		if whole {
			p.addProcess(&b.Exits[i])
		} else {
			p.addExit(&b.Exits[i])
		}
	}
	p.b.AuditRecords = append(p.b.AuditRecords, b.AuditRecords...)
	p.b.Alerts = append(p.b.Alerts, b.Alerts...)
	p.rows += len(b.AuditRecords) + len(b.Alerts)
}

// newRows is how many rows adding b would add: a session or process
// already pending only replaces its row, so the writer holding as many
// rows as it may still takes a held process's exit.
func (p *pending) newRows(b Batch) int {
	n := len(b.AuditRecords) + len(b.Alerts)
	for i := range b.Sessions {
		if _, ok := p.sessions[b.Sessions[i].AuditID]; !ok {
			n++
		}
	}
	for pr := range b.AllProcesses() {
		if _, ok := p.procs[pr.ProcessID]; !ok {
			n++
		}
	}
	return n
}

// addProcess takes a whole row; one pending as an exit alone becomes whole.
func (p *pending) addProcess(pr *join.Process) {
	i, ok := p.procs[pr.ProcessID]
	switch {
	case ok && i >= 0:
		p.b.Processes[i] = *pr
		return
	case ok:
		p.dropExit(-1 - i)
	default:
		p.rows++
	}
	p.procs[pr.ProcessID] = len(p.b.Processes)
	p.b.Processes = append(p.b.Processes, *pr)
}

// addExit takes an exit alone; one pending whole stays whole, with it.
func (p *pending) addExit(pr *join.Process) {
	if i, ok := p.procs[pr.ProcessID]; ok {
		if i >= 0 {
			p.b.Processes[i] = *pr
		} else {
			p.b.Exits[-1-i] = *pr
		}
		return
	}
	p.procs[pr.ProcessID] = -1 - len(p.b.Exits)
	p.b.Exits = append(p.b.Exits, *pr)
	p.rows++
}

// dropExit removes Exits[k], moving the last one into its place.
func (p *pending) dropExit(k int) {
	last := len(p.b.Exits) - 1
	if k != last {
		p.b.Exits[k] = p.b.Exits[last]
		p.procs[p.b.Exits[k].ProcessID] = -1 - k
	}
	p.b.Exits[last] = join.Process{}
	p.b.Exits = p.b.Exits[:last]
}

func (p *pending) batch() Batch { return p.b }

// reuseRows bounds the batch slices reset keeps: a burst's large batch
// is let go rather than held for good.
const reuseRows = 1024

// reset empties p after a commit. With reuse (no commit hook, which may
// keep the batch) the batch's slices are kept for the next one: a
// BatchWriter never keeps them past Write. Otherwise new ones are made,
// sized as the last. The key maps are the writer's own and are kept.
func (p *pending) reset(reuse bool) {
	last := p.b
	clear(p.sessions)
	clear(p.procs)
	*p = pending{sessions: p.sessions, procs: p.procs}
	p.b.Processes = resetRows(last.Processes, reuse)
	p.b.Exits = resetRows(last.Exits, reuse)
	p.b.Sessions = resetRows(last.Sessions, reuse)
}

// resetRows is the emptied rows slice reset hands the next batch.
func resetRows[T any](rows []T, reuse bool) []T {
	switch {
	case reuse && cap(rows) <= reuseRows:
		clear(rows) // drop what the rows referenced
		return rows[:0]
	case len(rows) == 0:
		return nil
	default:
		return make([]T, 0, min(len(rows), reuseRows))
	}
}
