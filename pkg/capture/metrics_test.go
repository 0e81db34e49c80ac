package capture

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestCollectorCountsEvents: each decoded event is counted under its kind,
// the two an exec makes through their looked-up children and any other
// kind through the vector.
func TestCollectorCountsEvents(t *testing.T) {
	c := NewCollector(nil)
	for _, k := range []Kind{KindExec, KindExec, KindExit, "other"} {
		c.Observe(Event{Kind: k})
	}
	for k, want := range map[Kind]float64{KindExec: 2, KindExit: 1, "other": 1} {
		if got := testutil.ToFloat64(c.events.WithLabelValues(string(k))); got != want {
			t.Errorf("events{kind=%q} = %v, want %v", k, got, want)
		}
	}
}
