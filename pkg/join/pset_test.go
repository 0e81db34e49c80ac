package join

import (
	"math/rand"
	"slices"
	"testing"
)

// TestPsetMatchesMap: a pset holds what a map of the same adds and
// removes holds, through growth, shrinking and wrapped probe runs.
func TestPsetMatchesMap(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	procs := make([]*proc, 300)
	for i := range procs {
		procs[i] = &proc{seq: uint64(rng.Intn(1<<20))<<20 | uint64(i)}
	}
	var s pset
	want := map[*proc]bool{}
	for op := range 50_000 {
		p := procs[rng.Intn(len(procs))]
		// Phases of mostly adds, then mostly removes, so the table grows and shrinks.
		if (op/5000)%2 == 0 == (rng.Intn(4) > 0) {
			if added := s.add(p); added == want[p] {
				t.Fatalf("op %d: add reported %v, held %v", op, added, want[p])
			}
			want[p] = true
		} else {
			s.remove(p)
			delete(want, p)
		}
		if s.len() != len(want) {
			t.Fatalf("op %d: %d held, want %d", op, s.len(), len(want))
		}
		if op%97 == 0 {
			got := slices.Collect(s.all())
			if len(got) != len(want) {
				t.Fatalf("op %d: all yields %d, want %d", op, len(got), len(want))
			}
			for _, q := range got {
				if !want[q] {
					t.Fatalf("op %d: yields a process not added", op)
				}
			}
			for q := range want {
				if s.slots[s.find(q)] != q {
					t.Fatalf("op %d: a held process is not found", op)
				}
			}
		}
	}
	var nilSet *pset
	nilSet.remove(procs[0])
	if nilSet.len() != 0 || len(slices.Collect(nilSet.all())) != 0 {
		t.Fatal("a nil pset is not empty")
	}
}

// TestPtableMatchesMap: a ptable holds what a map of the same puts and
// deletes holds, through growth and shrinking.
func TestPtableMatchesMap(t *testing.T) {
	rng := rand.New(rand.NewSource(2))
	procs := make([]*proc, 3000)
	for i := range procs {
		procs[i] = &proc{in: procInfo{ProcessID: procKey(i)}}
	}
	tab := newPtable()
	want := map[string]*proc{}
	for op := range 100_000 {
		p := procs[rng.Intn(len(procs))]
		id := p.in.ProcessID
		if ((op/20_000)%2 == 0) == (rng.Intn(4) > 0) {
			if want[id] == nil {
				tab.put(p)
				want[id] = p
			}
		} else {
			tab.del(id)
			delete(want, id)
		}
		if tab.len() != len(want) {
			t.Fatalf("op %d: %d held, want %d", op, tab.len(), len(want))
		}
		if op%997 == 0 {
			for _, q := range procs {
				if got := tab.get(q.in.ProcessID); got != want[q.in.ProcessID] {
					t.Fatalf("op %d: get %q: %p, want %p", op, q.in.ProcessID, got, want[q.in.ProcessID])
				}
			}
			if n := len(slices.Collect(tab.all())); n != len(want) {
				t.Fatalf("op %d: all yields %d, want %d", op, n, len(want))
			}
		}
	}
}
