package join

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/execid/correlator/pkg/vocab"
)

// TestRecordsVersion: while RecordsVersion does not move, Session answers
// the same for every key, whatever processes come and go; it moves when a
// record is stored, replaced or forgotten (the positive control: each
// scenario sees it move). The agent keeps Session's answers on this.
func TestRecordsVersion(t *testing.T) {
	keys := []string{idA, idB, idC, idA + "-x"}
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 7))
		j := newJoiner(t)
		now := t0
		answers := func() []any {
			var out []any
			for _, k := range keys {
				s, ok := j.Session(k)
				out = append(out, ok, s)
			}
			return out
		}
		moved := 0
		for step := range 40 {
			v, before := j.RecordsVersion(), answers()
			now = now.Add(time.Duration(rng.IntN(3000)) * time.Millisecond)
			id := keys[rng.IntN(3)]
			switch op := rng.IntN(5); op {
			case 0:
				r := xr(id)
				if rng.IntN(2) == 0 {
					r.Stages = r.Stages[:1] // a first stage, completed later
				}
				j.AddRecord(now, r)
			case 1:
				r := xr(id, "sh", "-c", "other")
				r.RequestURI += "&other" // a second request under the same ID
				j.AddRecord(now, r)
			case 2:
				j.AddProcess(now, pr(fmt.Sprintf("%d-%d", step, seed), "1-1", id, vocab.SourceEnv))
			case 3:
				j.AddExit(now, Exit{ProcessID: fmt.Sprintf("%d-%d", step-1, seed), Time: now})
			case 4:
				now = now.Add(time.Duration(rng.IntN(2)) * 2 * time.Hour) // past every TTL, sometimes
				j.Expire(now)
			}
			if j.RecordsVersion() != v {
				moved++
				continue
			}
			if after := answers(); !reflect.DeepEqual(before, after) {
				t.Fatalf("seed %d step %d: Session changed while RecordsVersion stayed %d:\nbefore %+v\nafter  %+v", seed, step, v, before, after)
			}
		}
		if moved == 0 {
			t.Fatalf("seed %d: RecordsVersion never moved over 40 steps with records added", seed)
		}
	}
}
