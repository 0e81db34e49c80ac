package join

import (
	"math"
	"time"
)

// queue is a FIFO with lazy deletion: entries whose seq no longer matches
// are skipped by the reader.
type queue struct {
	items []qent
	head  int
}

type qent struct {
	id  string
	seq uint64
	t   int64 // qtime: an entry is 32 bytes, not 48 with a time.Time
}

func (q *queue) push(id string, seq uint64, t time.Time) {
	q.requeue(qent{id: id, seq: seq, t: qtime(t)})
}

func (q *queue) requeue(e qent) { q.items = append(q.items, e) }

// qtime is t in Unix nanoseconds, clamped to what an int64 holds (the zero
// time comes first). Queue deadlines thus follow the wall clock, as exit
// times (the kernel's) always did.
func qtime(t time.Time) int64 {
	switch {
	case t.Before(qtimeMin):
		return math.MinInt64
	case t.After(qtimeMax):
		return math.MaxInt64
	}
	return t.UnixNano()
}

var qtimeMin, qtimeMax = time.Unix(0, math.MinInt64), time.Unix(0, math.MaxInt64)

// size is the number of entries, stale ones included.
func (q *queue) size() int { return len(q.items) - q.head }

// compact drops stale entries once they outnumber live ones, so a queue whose
// head is a long-lived process cannot grow without bound behind it.
func (q *queue) compact(live int, keep func(qent) bool) {
	if q.size() <= 2*live+1024 {
		return
	}
	kept := make([]qent, 0, live)
	for _, e := range q.items[q.head:] {
		if keep(e) {
			kept = append(kept, e)
		}
	}
	q.items, q.head = kept, 0
}

func (q *queue) peek() (qent, bool) {
	if q.head >= len(q.items) {
		return qent{}, false
	}
	return q.items[q.head], true
}

func (q *queue) pop() {
	q.items[q.head] = qent{}
	q.head++
	// Compact once the dead prefix dominates: in place, as a copy sized to
	// what is left grew again at the next push (a twentieth of what the
	// agent allocated under the soak), unless the array is four times what
	// it holds (after a burst), which a copy gives back.
	if q.head > 1024 && q.head > len(q.items)/2 {
		live := q.items[q.head:]
		if cap(q.items) > 4*len(live)+4096 {
			q.items = append([]qent(nil), live...)
		} else {
			n := copy(q.items, live)
			clear(q.items[n:])
			q.items = q.items[:n]
		}
		q.head = 0
	}
}

// deadlines is a min-heap of queue entries by time: the roots waiting for
// their heuristic window to close, which do not arrive in deadline order.
type deadlines struct{ items []qent }

func (d *deadlines) Len() int { return len(d.items) }

func (d *deadlines) push(e qent) {
	d.items = append(d.items, e)
	for i := len(d.items) - 1; i > 0; {
		up := (i - 1) / 2
		if d.items[up].t <= d.items[i].t {
			break
		}
		d.items[up], d.items[i] = d.items[i], d.items[up]
		i = up
	}
}

func (d *deadlines) pop() qent {
	top := d.items[0]
	last := len(d.items) - 1
	d.items[0] = d.items[last]
	d.items = d.items[:last]
	for i := 0; ; {
		small, l, r := i, 2*i+1, 2*i+2
		if l < last && d.items[l].t < d.items[small].t {
			small = l
		}
		if r < last && d.items[r].t < d.items[small].t {
			small = r
		}
		if small == i {
			break
		}
		d.items[i], d.items[small] = d.items[small], d.items[i]
		i = small
	}
	return top
}

// procQueue is the processes in arrival order, read by two cursors: the
// process bounds evict from one (evictHead), the pending TTL expires from
// the other (pendHead). They read the same entries in the same order, so
// one entry a process serves both.
type procQueue struct {
	items []qent
	heads [2]int
}

const (
	evictHead = iota
	pendHead
)

func (q *procQueue) push(id string, seq uint64, t time.Time) {
	q.items = append(q.items, qent{id: id, seq: seq, t: qtime(t)})
}

// size is the number of entries either cursor has yet to read.
func (q *procQueue) size() int { return len(q.items) - min(q.heads[0], q.heads[1]) }

func (q *procQueue) peek(h int) (qent, bool) {
	if q.heads[h] >= len(q.items) {
		return qent{}, false
	}
	return q.items[q.heads[h]], true
}

func (q *procQueue) pop(h int) {
	i := q.heads[h]
	q.heads[h]++
	if q.heads[1-h] > i {
		q.items[i] = qent{} // both cursors are past it
	}
	// Drop the dead prefix once it dominates.
	if lo := min(q.heads[0], q.heads[1]); lo > 1024 && lo > len(q.items)/2 {
		q.items = append([]qent(nil), q.items[lo:]...)
		q.heads[0] -= lo
		q.heads[1] -= lo
	}
}

// compact drops entries keep refuses once the stale ones outnumber live
// ones; each cursor keeps its place among the entries kept.
func (q *procQueue) compact(live int, keep func(qent) bool) {
	if q.size() <= 2*live+1024 {
		return
	}
	lo := min(q.heads[0], q.heads[1])
	kept := make([]qent, 0, live)
	heads := q.heads
	for i, e := range q.items[lo:] {
		for h := range heads {
			if lo+i == q.heads[h] {
				heads[h] = len(kept)
			}
		}
		if keep(e) {
			kept = append(kept, e)
		}
	}
	for h := range heads {
		if q.heads[h] >= len(q.items) {
			heads[h] = len(kept)
		}
	}
	q.items, q.heads = kept, heads
}
