package join

// Hold makes the AddProcess and AddExit calls that follow keep their
// updates until Release, which returns one update per row changed
// meanwhile, in its state then. The state evolves exactly as without Hold:
// only the intermediate rows are not handed out. The agent holds over one
// burst of capture events, so an exec and its exit read in the same burst
// are output, stored and judged once.
//
// Call Release before AddRecord or Expire: a record evicted while held
// would take its session's update with it.
func (j *Joiner) Hold() { j.held = true }

// Release ends Hold and returns its updates: the held flush, and the last
// state of every changed process that was evicted meanwhile.
func (j *Joiner) Release() []Update {
	j.held = false
	out := j.heldOut
	j.heldOut = nil
	return append(out, j.flush()...)
}

// keepHeld saves the update of a changed process removed while held, which
// the flush that would have given it out before its removal never ran.
func (j *Joiner) keepHeld(p *proc) {
	if !j.held {
		return
	}
	if _, dirty := j.dirtyProcs[p.in.ProcessID]; dirty {
		ap := j.output(p)
		j.heldOut = append(j.heldOut, Update{Process: &ap})
	}
}
