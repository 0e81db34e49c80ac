package soak

import (
	"errors"
	"math"
	"os"
	"strings"
	"testing"
	"time"
)

// TestQueriesByKind: each kind's quantiles are its own queries', the
// whole run's p99 is every responder's query's (the control is reported
// as a kind of its own, not in it), and the kinds print in name order.
func TestQueriesByKind(t *testing.T) {
	q := &queries{}
	for i := 1; i <= 100; i++ {
		q.log = append(q.log, Query{Kind: "who", Took: time.Duration(i) * time.Millisecond})
	}
	for i := range 10 {
		q.add(Query{Kind: "command", Took: time.Duration(200+i) * time.Millisecond})
		// The control, slower than every query: in the p99 it would be its
		// value, and in the samples' latencies it would be counted.
		q.add(Query{Kind: controlKind, Took: time.Second})
	}
	if got := len(q.interval()); got != 10 {
		t.Errorf("%d latencies kept for the sample, want the 10 commands' (the control's left out)", got)
	}
	if c := len(q.log); c != 120 {
		t.Errorf("%d queries kept for the run, want 120 (the control's too)", c)
	}
	all, kinds := q.byKind()
	if c := kinds[controlKind]; c.N != 10 || c.P50 != 1000 {
		t.Errorf("the control: %+v, want 10 queries of 1000 ms", c)
	}
	if want := 208.0; all != want { // 110 queries: rank int(110*0.99) = 108, command's ninth
		t.Errorf("p99 of every query %.1f, want %.1f", all, want)
	}
	who := kinds["who"]
	if who.N != 100 || who.P50 != 51 || who.P90 != 91 || who.P99 != 100 || who.Max != 100 {
		t.Errorf("who: %+v, want 100 queries, p50 51, p90 91, p99 100, most 100", who)
	}
	if c := kinds["command"]; c.N != 10 || c.P50 != 205 || c.Max != 209 {
		t.Errorf("command: %+v, want 10 queries, p50 205, most 209", c)
	}
	text := formatKinds(kinds)
	if !strings.HasPrefix(text, "  command: p50 205.00") || !strings.Contains(text, "\n  control: /healthz: p50 1000.00") || !strings.Contains(text, "\n  who: p50 51.00, p90 91.00, p99 100.00, most 100.00 ms (100 queries)\n") {
		t.Errorf("formatKinds:\n%s", text)
	}
	if all, kinds := (&queries{}).byKind(); all != 0 || len(kinds) != 0 {
		t.Errorf("no queries: %v, %v", all, kinds)
	}
}

// TestTimerWaits: the waits the timer read are summarized, those it could
// not are counted apart, not read as no wait.
func TestTimerWaits(t *testing.T) {
	var qs []Query
	for i := range 100 {
		qs = append(qs, Query{TimerWaited: time.Duration(i) * time.Millisecond})
	}
	qs = append(qs, Query{TimerWaited: unknownWait}, Query{TimerWaited: unknownWait})
	w, unknown := timerWaits(qs)
	if w.N != 100 || unknown != 2 || w.P99 != 99 || w.P50 != 50 || w.Max != 99 {
		t.Fatalf("timerWaits = %+v, %d unknown; want 100 read (p50 50, p99 99, most 99 ms), 2 unknown", w, unknown)
	}
	fb := formatFirstBytes([]Query{{Kind: "who", Took: 10 * time.Millisecond, FirstByte: 4 * time.Millisecond},
		{Kind: "command", Took: 3 * time.Millisecond, FirstByte: 3 * time.Millisecond}})
	if want := "  command: to the first byte p50 3.00, p99 3.00; after it p50 0.00, p99 0.00 ms\n" +
		"  who: to the first byte p50 4.00, p99 4.00; after it p50 6.00, p99 6.00 ms\n"; fb != want {
		t.Fatalf("formatFirstBytes = %q, want %q", fb, want)
	}
	if got := formatRoutes(map[string]float64{"session": 3.5, "processes": 12.25, "alerts": math.NaN()}); got != "processes 12.25, session 3.50" {
		t.Fatalf("formatRoutes = %q", got)
	}
}

// TestAgentWaits: the agent's waits and run times are read over the slow
// queries alone, those not read counted apart; a reading that went back
// is not read.
func TestAgentWaits(t *testing.T) {
	ms := time.Millisecond
	qs := []Query{{Took: 5 * ms, AgentWaited: 4 * ms}, {Took: 12 * ms, AgentWaited: 6 * ms},
		{Took: 15 * ms, AgentWaited: 2 * ms}, {Took: 20 * ms, AgentWaited: unknownWait}, {Took: 10 * ms, AgentWaited: 9 * ms}}
	w, unknown := agentWaits(qs, 10*ms)
	if w.N != 2 || unknown != 1 || w.P50 != 6 || w.Max != 6 {
		t.Fatalf("agentWaits = %+v, %d unknown; want the two slow ones read (p50 6, most 6 ms), 1 unknown", w, unknown)
	}
	if _, err := agentCPU(0); err == nil {
		t.Error("agentCPU(0) read a wait; want an error: no agent")
	}
	if c, err := agentCPU(os.Getpid()); err != nil || c.ran <= 0 {
		t.Errorf("agentCPU of the test's own PID: %+v, %v; want a run time", c, err)
	}
	ran := []Query{{Took: 12 * ms, AgentRan: 7 * ms}, {Took: 5 * ms, AgentRan: 30 * ms}, {Took: 14 * ms, AgentRan: unknownWait}}
	if r, unknown := agentRuns(ran, 10*ms); r.N != 1 || unknown != 1 || r.P50 != 7 {
		t.Errorf("agentRuns = %+v, %d unknown; want the slow one read (7 ms), 1 unknown", r, unknown)
	}
	unknown2 := cpuTime{ran: unknownWait, waited: unknownWait}
	for _, c := range []struct {
		before, after cpuTime
		err           error
		want          cpuTime
	}{
		{cpuTime{ran: 10 * ms, waited: ms}, cpuTime{ran: 14 * ms, waited: 2 * ms}, nil, cpuTime{ran: 4 * ms, waited: ms}},
		{cpuTime{ran: 10 * ms, waited: ms}, cpuTime{ran: 10 * ms, waited: ms}, nil, cpuTime{}},
		{cpuTime{ran: 10 * ms}, cpuTime{ran: 9 * ms}, nil, unknown2},                              // a thread exited
		{cpuTime{ran: 10 * ms, waited: 3 * ms}, cpuTime{ran: 14 * ms, waited: ms}, nil, unknown2}, // its wait too
		{cpuTime{}, cpuTime{ran: ms}, errors.New("no agent running"), unknown2},
	} {
		if got := cpuBetween(c.before, c.after, c.err); got != c.want {
			t.Errorf("cpuBetween(%+v, %+v, %v) = %+v, want %+v", c.before, c.after, c.err, got, c.want)
		}
	}
}
