package capture

import "testing"

// TestFilter: --containers-only keeps container processes, --with-id-only
// those that carry or claim an ID or a key.
func TestFilter(t *testing.T) {
	host := Event{}
	inPod := Event{Exec: Exec{ContainerID: "c1"}}
	withID := Event{Exec: Exec{ContainerID: "c1"}, AuditID: "a1"}
	claimed := Event{ClaimedAuditID: "a2"}
	keyed := Event{Keys: map[string]KeyValue{"K": {}}}
	for _, tc := range []struct {
		f    Filter
		ev   Event
		want bool
	}{
		{Filter{}, host, true},
		{Filter{ContainersOnly: true}, host, false},
		{Filter{ContainersOnly: true}, inPod, true},
		{Filter{WithIDOnly: true}, inPod, false},
		{Filter{WithIDOnly: true}, withID, true},
		{Filter{WithIDOnly: true}, claimed, true},
		{Filter{WithIDOnly: true}, keyed, true},
		{Filter{ContainersOnly: true, WithIDOnly: true}, claimed, false},
	} {
		if got := tc.f.Keep(tc.ev); got != tc.want {
			t.Errorf("%+v keeps %+v: %v, want %v", tc.f, tc.ev, got, tc.want)
		}
	}
}
