package join

import "iter"

// pset is a set of held processes: an open-addressing table, linear
// probing, hashed on the process's seq (unique, never changed). A node
// files each process in up to five sets (deps, spoProcs, its ID's carriers,
// its session's members); a map[*proc]struct{} costs 16 bytes a slot and
// 184 bytes for a set of one, this 8 and 16.
type pset struct {
	slots []*proc // a power of two long, at most 7/8 full
	n     int
}

// psetMin is the smallest table: most sets hold one or two processes.
const psetMin = 2

func (s *pset) len() int {
	if s == nil {
		return 0
	}
	return s.n
}

// home is p's first slot in a table of size slots (Fibonacci hashing).
func home(p *proc, size int) int {
	return int((p.seq * 0x9e3779b97f4a7c15) >> 32 & uint64(size-1))
}

// find returns p's slot, or the empty slot where it would go.
func (s *pset) find(p *proc) int {
	mask := len(s.slots) - 1
	i := home(p, len(s.slots))
	for s.slots[i] != nil && s.slots[i] != p {
		i = (i + 1) & mask
	}
	return i
}

// add puts p in s; it reports whether p was not in it.
func (s *pset) add(p *proc) bool {
	// Seqs come nearly in order and Fibonacci hashing spreads them evenly,
	// so probe runs stay short even this full.
	if (s.n+1)*8 > len(s.slots)*7 {
		s.resize(max(psetMin, 2*len(s.slots)))
	}
	i := s.find(p)
	if s.slots[i] == p {
		return false
	}
	s.slots[i] = p
	s.n++
	return true
}

// remove takes p out of s, if it is in it.
func (s *pset) remove(p *proc) {
	if s == nil || s.n == 0 {
		return
	}
	i := s.find(p)
	if s.slots[i] != p {
		return
	}
	s.slots[backShift(s.slots, i, func(p *proc) int { return home(p, len(s.slots)) })] = nil
	s.n--
	if len(s.slots) > 8 && s.n*8 < len(s.slots) {
		s.resize(len(s.slots) / 2) // a burst's sets give their memory back
	}
}

// backShift empties slot i of a linear-probing table whose entries hash to
// home: each later entry of the run that could no longer be reached across
// the gap moves up into it. It returns the slot left for the caller to
// clear.
func backShift(slots []*proc, i int, home func(*proc) int) int {
	mask := len(slots) - 1
	for j := (i + 1) & mask; slots[j] != nil; j = (j + 1) & mask {
		h := home(slots[j])
		if (j > i && (h <= i || h > j)) || (j < i && h <= i && h > j) {
			slots[i], slots[j] = slots[j], nil
			i = j
		}
	}
	return i
}

func (s *pset) resize(size int) {
	old := s.slots
	s.slots = make([]*proc, size)
	for _, p := range old {
		if p != nil {
			s.slots[s.find(p)] = p
		}
	}
}

// all yields the processes in s; s must not change meanwhile.
func (s *pset) all() iter.Seq[*proc] {
	return func(yield func(*proc) bool) {
		if s == nil {
			return
		}
		for _, p := range s.slots {
			if p != nil && !yield(p) {
				return
			}
		}
	}
}

// fileProc and unfileProc keep a map of psets, dropping emptied ones.
func fileProc(m map[string]*pset, k string, p *proc) {
	s := m[k]
	if s == nil {
		s = &pset{}
		m[k] = s
	}
	s.add(p)
}

func unfileProc(m map[string]*pset, k string, p *proc) {
	if s := m[k]; s != nil {
		s.remove(p)
		if s.n == 0 {
			delete(m, k)
		}
	}
}
