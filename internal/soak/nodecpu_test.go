package soak

import (
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestParseProcStat(t *testing.T) {
	const kernel = "cpu  3065315 419032 1462184 8590566 437633 0 10478 103333 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\nintr 1\n"
	for _, tc := range []struct {
		in   string
		want nodeCPU
		err  string
	}{
		{kernel, nodeCPU{total: 3065315 + 419032 + 1462184 + 8590566 + 437633 + 10478 + 103333, idle: 8590566 + 437633, steal: 103333}, ""},
		{"cpu 1 2 3 4 5 6 7 8", nodeCPU{total: 36, idle: 9, steal: 8}, ""},
		{"cpu 1 2 3 4 5 6 7", nodeCPU{}, "7 cpu fields"},
		{"cpu0 1 2 3 4 5 6 7 8", nodeCPU{}, "not the aggregate"},
		{"", nodeCPU{}, "not the aggregate"},
		{"cpu 1 2 3 x 5 6 7 8", nodeCPU{}, `field 4 "x"`},
		{"cpu 1 2 3 -4 5 6 7 8", nodeCPU{}, `field 4 "-4"`},
		{"cpu 4611686018427387904 4611686018427387904 0 0 0 0 0 0", nodeCPU{}, "overflow"},
		{"intr 1\ncpu 1 2 3 4 5 6 7 8", nodeCPU{}, "not the aggregate"},
	} {
		got, err := parseProcStat([]byte(tc.in))
		if got != tc.want || (err == nil) != (tc.err == "") || err != nil && !strings.Contains(err.Error(), tc.err) {
			t.Errorf("parseProcStat(%q) = %+v, %v; want %+v, %q", tc.in, got, err, tc.want, tc.err)
		}
	}
}

func TestNodeShares(t *testing.T) {
	a := nodeCPU{total: 1000, idle: 600, steal: 10}
	for _, tc := range []struct {
		cur         nodeCPU
		busy, steal float64
		ok          bool
	}{
		{nodeCPU{total: 1200, idle: 700, steal: 30}, 0.4, 0.1, true},
		{nodeCPU{total: 1200, idle: 800, steal: 10}, 0, 0, true},
		{nodeCPU{total: 1200, idle: 600, steal: 10}, 1, 0, true},
		{a, 0, 0, false}, // no time passed
		{nodeCPU{total: 1200, idle: 500, steal: 30}, 0, 0, false}, // idle went back
		{nodeCPU{total: 1200, idle: 700, steal: 5}, 0, 0, false},  // steal went back
		{nodeCPU{total: 1100, idle: 700, steal: 20}, 0, 0, false}, // more idle and steal than time
	} {
		busy, steal, ok := nodeShares(a, tc.cur)
		if ok != tc.ok || busy != tc.busy || steal != tc.steal {
			t.Errorf("nodeShares(%+v, %+v) = %v, %v, %v; want %v, %v, %v", a, tc.cur, busy, steal, ok, tc.busy, tc.steal, tc.ok)
		}
	}
}

// TestNodeBusyWhileEveryCPUSpins: while a thread spins on every CPU the
// node is busy (or stolen from) nearly all the time, whatever else runs;
// the reading of this machine's /proc/stat is what is tested.
func TestNodeBusyWhileEveryCPUSpins(t *testing.T) {
	before, err := readNodeCPU()
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	end := time.Now().Add(500 * time.Millisecond)
	for range runtime.NumCPU() {
		wg.Go(func() {
			for time.Now().Before(end) {
			}
		})
	}
	wg.Wait()
	after, err := readNodeCPU()
	if err != nil {
		t.Fatal(err)
	}
	busy, steal, ok := nodeShares(before, after)
	if !ok || busy+steal < 0.8 {
		t.Fatalf("every CPU spun for 500 ms: busy %.2f, stolen %.2f (ok %v) of the node's CPU time; want at least 0.8 together", busy, steal, ok)
	}
}

// FuzzParseProcStat: any bytes give times of at least zero, idle and
// steal within the total, or an error.
func FuzzParseProcStat(f *testing.F) {
	f.Add([]byte("cpu  3065315 419032 1462184 8590566 437633 0 10478 103333 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n"))
	f.Add([]byte("cpu 1 2 3 4 5 6 7 8"))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := parseProcStat(b)
		if err == nil && (c.total < 0 || c.idle < 0 || c.steal < 0 || c.idle+c.steal > c.total) {
			t.Fatalf("parseProcStat(%q) = %+v", b, c)
		}
	})
}
