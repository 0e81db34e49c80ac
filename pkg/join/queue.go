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
	// Compact once the dead prefix dominates.
	if q.head > 1024 && q.head > len(q.items)/2 {
		q.items = append([]qent(nil), q.items[q.head:]...)
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
