package auditlog

import "time"

// aged reports whether records have an age bound.
func (m *Merger) aged() bool { return m.cfg.DoneIdle > 0 || m.cfg.OpenIdle > 0 }

// touch notes that a stage reached e: its idle time starts again at the
// next Expire.
func (m *Merger) touch(e *entry) {
	if !m.aged() {
		return
	}
	e.last = time.Time{}
	if !e.fresh {
		e.fresh = true
		m.fresh = append(m.fresh, e)
	}
}

// idle is how long e may wait for its next stage.
func (m *Merger) idle(e *entry) time.Duration {
	if e.rec.Complete() {
		return m.cfg.DoneIdle
	}
	return m.cfg.OpenIdle
}

// Expire lets go the records no stage reached for their idle bound, timed
// from the first Expire after their latest stage (so the Merger keeps no
// clock of its own). Call it every few seconds with a monotonic now; it
// walks the records at most eight times per bound.
func (m *Merger) Expire(now time.Time) {
	if !m.aged() {
		return
	}
	for i, e := range m.fresh {
		e.last, e.fresh = now, false
		m.fresh[i] = nil
	}
	m.fresh = m.fresh[:0]
	if now.Before(m.sweepAt) {
		return
	}
	step := m.cfg.DoneIdle
	if step <= 0 || (m.cfg.OpenIdle > 0 && m.cfg.OpenIdle < step) {
		step = m.cfg.OpenIdle
	}
	m.sweepAt = now.Add(max(step/8, time.Second))
	// Rebuild the eviction order without what leaves, so that it holds
	// only live records whatever their ages.
	kept := m.order[:0]
	for _, e := range m.order[m.head:] {
		if idle := m.idle(e); idle > 0 && !e.last.IsZero() && now.Sub(e.last) >= idle {
			m.stats.Expired++
			m.bytes -= e.size
			m.unfile(e)
			m.bury(e)
			continue
		}
		kept = append(kept, e)
	}
	clear(m.order[len(kept):])
	m.order, m.head = kept, 0
}
