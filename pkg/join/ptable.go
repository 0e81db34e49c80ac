package join

import (
	"hash/maphash"
	"iter"
)

// ptable is the held processes by ID: an open-addressing table of *proc,
// linear probing, the key being the process's own ID. A
// map[string]*proc costs about 35 bytes a process (24-byte slots); this
// about 14.
type ptable struct {
	slots []*proc // a power of two long, at most 3/4 full
	n     int
	seed  maphash.Seed
}

func newPtable() ptable { return ptable{seed: maphash.MakeSeed()} }

func (t *ptable) len() int { return t.n }

func (t *ptable) home(id string) int {
	return int(maphash.String(t.seed, id) & uint64(len(t.slots)-1))
}

// find returns id's slot, or the empty slot where it would go.
func (t *ptable) find(id string) int {
	mask := len(t.slots) - 1
	i := t.home(id)
	for t.slots[i] != nil && t.slots[i].in.ProcessID != id {
		i = (i + 1) & mask
	}
	return i
}

// get returns the process of ID id, or nil.
func (t *ptable) get(id string) *proc {
	if t.n == 0 {
		return nil
	}
	return t.slots[t.find(id)]
}

// put files p, whose ID must not be held.
func (t *ptable) put(p *proc) {
	if (t.n+1)*4 > len(t.slots)*3 {
		t.resize(max(8, 2*len(t.slots)))
	}
	t.slots[t.find(p.in.ProcessID)] = p
	t.n++
}

// del forgets the process of ID id, if held.
func (t *ptable) del(id string) {
	if t.n == 0 {
		return
	}
	i := t.find(id)
	if t.slots[i] == nil {
		return
	}
	t.slots[backShift(t.slots, i, func(p *proc) int { return t.home(p.in.ProcessID) })] = nil
	t.n--
	if len(t.slots) > 64 && t.n*8 < len(t.slots) {
		t.resize(len(t.slots) / 2) // a burst's table gives its memory back
	}
}

func (t *ptable) resize(size int) {
	old := t.slots
	t.slots = make([]*proc, size)
	for _, p := range old {
		if p != nil {
			t.slots[t.find(p.in.ProcessID)] = p
		}
	}
}

// all yields the held processes; t must not change meanwhile.
func (t *ptable) all() iter.Seq[*proc] {
	return func(yield func(*proc) bool) {
		for _, p := range t.slots {
			if p != nil && !yield(p) {
				return
			}
		}
	}
}
