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

// TestQueueFIFO: a queue reads back what a plain slice of the same pushes
// would, through pops that compact it in place and after bursts that
// shrink it; and a steady push and pop allocates nothing once warm.
func TestQueueFIFO(t *testing.T) {
	rng := rand.New(rand.NewSource(2))
	var q queue
	var model []qent
	for i := range 200_000 {
		burst := i%50_000 < 5_000 // pushes outrun pops, then pops drain
		if r := rng.Intn(10); burst && r < 8 || !burst && r < 5 {
			e := qent{id: fmt.Sprint(i), seq: uint64(i), t: int64(i)}
			q.requeue(e)
			model = append(model, e)
			continue
		}
		got, ok := q.peek()
		if ok != (len(model) > 0) || ok && got != model[0] {
			t.Fatalf("op %d: peek %v %v, want %v", i, got, ok, model[:min(1, len(model))])
		}
		if ok {
			q.pop()
			model = model[1:]
		}
	}
	if q.size() != len(model) {
		t.Fatalf("holds %d, want %d", q.size(), len(model))
	}
	if q.size() < 10_000 {
		t.Fatalf("the bursts left %d entries, too few to show a shrink", q.size())
	}
	for q.size() > 100 {
		q.pop()
	}
	if c, n := cap(q.items), q.size(); c > 4*n+4096+2048 {
		t.Errorf("after draining a burst: capacity %d for %d entries", c, n)
	}

	var steady queue
	e := qent{id: "a"}
	for range 10_000 {
		steady.requeue(e)
	}
	// Each run spans several compactions (one per ~10,000 pops here).
	if n := testing.AllocsPerRun(20, func() {
		for range 50_000 {
			steady.requeue(e)
			steady.pop()
		}
	}); n != 0 {
		t.Errorf("50,000 steady pushes and pops allocate %.0f times", n)
	}
}
