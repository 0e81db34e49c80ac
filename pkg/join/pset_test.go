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
