package cluster

import (
	"cmp"
	"encoding/json"
	"slices"
	"strconv"
)

// merger keeps the first limit (0: every) items of what the nodes
// answer, in order, an item several nodes answer identically (agents
// that share a store) once with all their nodes. Each node's items are
// merged as the node answers and let go, so a merged answer holds at
// most limit items however many nodes answer. Items tied in order are
// ordered by their key, so the answer does not depend on which node
// answered first.
type merger[T any, P nodeLister[T]] struct {
	limit int
	order func(a, b *T) int
	key   func(*T) any
	// kept is sorted; byKey finds a kept item by its key.
	kept      []*keyed[T]
	byKey     map[string]*keyed[T]
	truncated bool
	unkeyed   int
}

type keyed[T any] struct {
	item T
	key  string
}

func newMerger[T any, P nodeLister[T]](limit int, order func(a, b *T) int, key func(*T) any) *merger[T, P] {
	return &merger[T, P]{limit: limit, order: order, key: key, byKey: map[string]*keyed[T]{}}
}

// sessionMerger merges sessions newest first.
func sessionMerger(limit int) *merger[Session, *Session] {
	return newMerger[Session](limit, func(a, b *Session) int {
		return cmp.Or(b.RequestReceivedTimestamp.Compare(a.RequestReceivedTimestamp), cmp.Compare(a.AuditID, b.AuditID))
	}, func(s *Session) any { return s.Session })
}

// alertMerger merges alerts newest first.
func alertMerger(limit int) *merger[Alert, *Alert] {
	return newMerger[Alert](limit, func(a, b *Alert) int {
		return cmp.Or(b.Time.Compare(a.Time), cmp.Compare(a.ID, b.ID))
	}, func(a *Alert) any { return a.Alert })
}

func (m *merger[T, P]) compare(a, b *keyed[T]) int {
	return cmp.Or(m.order(&a.item, &b.item), cmp.Compare(a.key, b.key))
}

// add merges one node's items.
func (m *merger[T, P]) add(items []T) {
	var fresh []*keyed[T]
	full := m.limit > 0 && len(m.kept) >= m.limit
	for i := range items {
		it := &items[i]
		// After the last kept item: out, without encoding it. An item
		// identical to a kept one is never after the last.
		if full && m.order(it, &m.kept[len(m.kept)-1].item) > 0 {
			m.truncated = true
			continue
		}
		k := m.keyOf(it)
		if e, ok := m.byKey[k]; ok {
			nodes := P(&e.item).nodeList()
			*nodes = append(*nodes, *P(it).nodeList()...)
			slices.Sort(*nodes)
			continue
		}
		e := &keyed[T]{item: *it, key: k}
		m.byKey[k] = e
		fresh = append(fresh, e)
	}
	if len(fresh) == 0 {
		return
	}
	slices.SortFunc(fresh, m.compare)
	n := len(m.kept) + len(fresh)
	if m.limit > 0 {
		n = min(n, m.limit)
	}
	out := make([]*keyed[T], 0, n)
	kept := m.kept
	for len(kept)+len(fresh) > 0 {
		var e *keyed[T]
		if len(fresh) == 0 || len(kept) > 0 && m.compare(kept[0], fresh[0]) <= 0 {
			e, kept = kept[0], kept[1:]
		} else {
			e, fresh = fresh[0], fresh[1:]
		}
		if len(out) == n {
			delete(m.byKey, e.key)
			m.truncated = true
			continue
		}
		out = append(out, e)
	}
	m.kept = out
}

// keyOf is the key identical items share; an item that cannot be
// encoded is its own.
func (m *merger[T, P]) keyOf(it *T) string {
	b, err := json.Marshal(m.key(it))
	if err != nil {
		m.unkeyed++
		return "\x00" + strconv.Itoa(m.unkeyed)
	}
	return string(b)
}

// result is the merged items, and whether the nodes held more.
func (m *merger[T, P]) result() ([]T, bool) {
	out := make([]T, len(m.kept))
	for i, e := range m.kept {
		out[i] = e.item
	}
	return out, m.truncated
}
