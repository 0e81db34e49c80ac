package auditlog

import (
	"maps"
	"slices"
	"testing"
)

// TestFoldAsOneMerger: for every split of a request's stages into two
// snapshots, each merged alone, Fold in either order gives what one Merger
// gives from all of them: a consumer that meets the request in two parts
// (the merger let it go, a stage came late) loses nothing.
func TestFoldAsOneMerger(t *testing.T) {
	at := []string{"2026-01-01T00:00:00Z", "2026-01-01T00:00:01Z", "2026-01-01T00:05:00Z", "2026-01-01T00:05:01Z"}
	for _, last := range []string{StageResponseComplete, StagePanic} {
		evs := []Event{
			streamEvent("a", StageRequestReceived, 0, at[0]),
			streamEvent("a", StageResponseStarted, 101, at[1]),
			streamEvent("a", last, map[string]int32{StageResponseComplete: 200, StagePanic: 500}[last], at[2]),
		}
		evs[0].Annotations["only-received"] = "x"
		whole := mergeAll(evs)
		for mask := 1; mask < 1<<len(evs)-1; mask++ {
			var a, b []Event
			for i, ev := range evs {
				if mask&(1<<i) != 0 {
					a = append(a, ev)
				} else {
					b = append(b, ev)
				}
			}
			ra, rb := mergeAll(a), mergeAll(b)
			for _, got := range []ExecRecord{Fold(&ra, &rb), Fold(&rb, &ra)} {
				if !sameRecord(got, whole) {
					t.Errorf("%s, split %03b: folded %+v, want %+v", last, mask, got, whole)
				}
			}
		}
	}
}

// TestFoldDoesNotShare: the folded record shares nothing with its inputs.
func TestFoldDoesNotShare(t *testing.T) {
	a := mergeAll([]Event{streamEvent("a", StageRequestReceived, 0, "2026-01-01T00:00:00Z")})
	b := mergeAll([]Event{streamEvent("a", StageResponseComplete, 200, "2026-01-01T00:05:00Z")})
	f := Fold(&a, &b)
	f.Annotations["stage"], f.Command[0], f.Stages[0] = "changed", "changed", "changed"
	if a.Annotations["stage"] != StageRequestReceived || b.Annotations["stage"] != StageResponseComplete ||
		a.Command[0] != "id" || b.Command[0] != "id" || a.Stages[0] != StageRequestReceived {
		t.Fatalf("Fold's result aliases its inputs: %+v %+v", a, b)
	}
}

func mergeAll(evs []Event) ExecRecord {
	m := NewMerger(MergerConfig{})
	for _, ev := range evs {
		ev.Annotations = maps.Clone(ev.Annotations)
		m.Add(ev)
	}
	return m.Records()[0]
}

func sameRecord(a, b ExecRecord) bool {
	return slices.Equal(a.Stages, b.Stages) && a.Code == b.Code && a.EndTimestamp.Equal(b.EndTimestamp) &&
		a.RequestReceivedTimestamp.Equal(b.RequestReceivedTimestamp) && maps.Equal(a.Annotations, b.Annotations) &&
		a.Decision == b.Decision && a.Reason == b.Reason && slices.Equal(a.Command, b.Command) &&
		slices.Equal(a.Flags, b.Flags) && a.User.Username == b.User.Username && a.Container == b.Container
}
