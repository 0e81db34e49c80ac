package join

import (
	"fmt"
	"math/rand"
	"testing"
)

// TestProcQueueCursors: the two cursors of one procQueue read what two
// queues of the same pushes would, through pops and compactions.
func TestProcQueueCursors(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	var pq procQueue
	var two [2]queue
	held := map[string]bool{}
	keep := func(e qent) bool { return held[e.id] }
	for i := range 20_000 {
		switch r := rng.Intn(10); {
		case r < 4:
			id := fmt.Sprint(i)
			held[id] = rng.Intn(4) > 0
			pq.push(id, uint64(i), t0)
			two[0].push(id, uint64(i), t0)
			two[1].push(id, uint64(i), t0)
		case r < 8:
			// Readers skip what keep refuses, which compaction may drop.
			h := r % 2
			skip(&pq, &two[h], h, keep)
			got, ok := pq.peek(h)
			want, wok := two[h].peek()
			if ok != wok || got != want {
				t.Fatalf("op %d cursor %d: peek %v %v, want %v %v", i, h, got, ok, want, wok)
			}
			if ok {
				pq.pop(h)
				two[h].pop()
			}
		default:
			pq.compact(0, keep)
			for h := range two {
				two[h].compact(0, keep)
			}
		}
	}
	if pq.size() > max(two[0].size(), two[1].size()) {
		t.Fatalf("holds %d entries, the two queues %d and %d", pq.size(), two[0].size(), two[1].size())
	}
}

func skip(pq *procQueue, q *queue, h int, keep func(qent) bool) {
	for e, ok := q.peek(); ok && !keep(e); e, ok = q.peek() {
		q.pop()
	}
	for e, ok := pq.peek(h); ok && !keep(e); e, ok = pq.peek(h) {
		pq.pop(h)
	}
}
