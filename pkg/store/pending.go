package store

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
