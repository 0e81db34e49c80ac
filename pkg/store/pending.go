package store

import "github.com/execid/correlator/pkg/join"

// pending is the open batch, collapsing rows with the same key.
type pending struct {
	rows     int
	waiters  []chan<- error
	b        Batch
	sessions map[string]int
	procs    map[string]int
}

func (p *pending) add(b Batch) {
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
	for _, pr := range b.Processes {
		if i, ok := p.procs[pr.ProcessID]; ok {
			p.b.Processes[i] = pr
			continue
		}
		p.procs[pr.ProcessID] = len(p.b.Processes)
		p.b.Processes = append(p.b.Processes, pr)
		p.rows++
	}
	p.b.AuditRecords = append(p.b.AuditRecords, b.AuditRecords...)
	p.b.Alerts = append(p.b.Alerts, b.Alerts...)
	p.rows += len(b.AuditRecords) + len(b.Alerts)
}

func (p *pending) batch() Batch { return p.b }

// reset empties p after a commit. The batch's slices went to the store
// (and the commit hook, which may keep them), so new ones are made, sized
// as the last; the key maps are the writer's own and are kept.
func (p *pending) reset() {
	last := p.b
	clear(p.sessions)
	clear(p.procs)
	*p = pending{sessions: p.sessions, procs: p.procs}
	if n := len(last.Processes); n > 0 {
		p.b.Processes = make([]join.Process, 0, n)
	}
	if n := len(last.Sessions); n > 0 {
		p.b.Sessions = make([]join.Session, 0, n)
	}
}
