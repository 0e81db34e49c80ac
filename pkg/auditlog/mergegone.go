package auditlog

import (
	"hash/fnv"
	"slices"
)

// What a Merger remembers of the requests it let go (its caps, or their
// idle time): under which audit ID, and a hash of what each asked. A new
// request under an ID that another, different request used is flagged
// audit_id_conflict as if both were still held: the records are the
// memory, the hashes are all the flag needs. At most the Merger's
// MaxRecords are remembered, oldest forgotten first (about 130 bytes
// each).
type gone struct {
	ids   map[string][]uint64
	queue []goneEntry // oldest first, from head
	head  int
}

type goneEntry struct {
	id string
	h  uint64
}

// hashKey is a request key's hash; a collision only hides a conflict the
// records themselves would have shown while held.
func hashKey(k requestKey) uint64 {
	h := fnv.New64a()
	for _, s := range []string{k.uri, k.verb, k.user, k.namespace, k.name, k.subresource} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	var b [2]byte
	if k.missing {
		b[0] = 1
	}
	if k.cut {
		b[1] = 1
	}
	h.Write(b[:])
	return h.Sum64()
}

// bury remembers that e's request was let go.
func (m *Merger) bury(e *entry) {
	if m.gone.ids == nil {
		m.gone.ids = map[string][]uint64{}
	}
	id, h := e.rec.AuditID, hashKey(e.key)
	if hs := m.gone.ids[id]; !slices.Contains(hs, h) {
		m.gone.ids[id] = append(hs, h)
		m.gone.queue = append(m.gone.queue, goneEntry{id, h})
	}
	for len(m.gone.queue)-m.gone.head > m.max {
		old := m.gone.queue[m.gone.head]
		m.gone.queue[m.gone.head] = goneEntry{}
		m.gone.head++
		hs := slices.DeleteFunc(m.gone.ids[old.id], func(x uint64) bool { return x == old.h })
		if len(hs) == 0 {
			delete(m.gone.ids, old.id)
		} else {
			m.gone.ids[old.id] = hs
		}
	}
	if m.gone.head > 1024 && m.gone.head > len(m.gone.queue)/2 {
		m.gone.queue = append([]goneEntry(nil), m.gone.queue[m.gone.head:]...)
		m.gone.head = 0
	}
}

// usedByOther reports whether a request the Merger let go under id asked
// something other than k.
func (m *Merger) usedByOther(id string, k requestKey) bool {
	hs := m.gone.ids[id]
	if len(hs) == 0 {
		return false
	}
	h := hashKey(k)
	return slices.ContainsFunc(hs, func(x uint64) bool { return x != h })
}
