package capture

import (
	"fmt"
	"strconv"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/execid/correlator/internal/testutil"
)

// TestKernelCompatPlaces: the compat object's image places (a hash map,
// for kernels without task storage) are freed when their tasks exit, and a
// full map is counted, never silent. It runs the compat object on any
// kernel, whichever object Load would choose there.
func TestKernelCompatPlaces(t *testing.T) {
	testutil.RequireRoot(t)
	const children = 100
	cfg := Default()
	cfg.PinPath = testPinPath(t)
	cfg.PlaceEntries = 64
	cfg.Scope = ScopeAll
	b, err := chooseBuild(ObjectCompat)
	if err != nil {
		t.Fatal(err)
	}
	h := startBuild(t, cfg, b)
	before, err := h.p.Stats()
	if err != nil {
		t.Fatal(err)
	}
	// A shell (its place made at exec) forks more children than the map
	// holds, each reading the shell's stdin (fd 3: an asynchronous list's
	// stdin is /dev/null) until release closes it, however late it started.
	script := "exec 3<&0; for i in $(seq " + strconv.Itoa(children) + "); do (read x <&3) & done; wait"
	pid, release := spawnWaiting(t, []string{"/bin/sh", "-c", script}, []string{"PATH=/bin:/usr/bin"})
	h.waitFor("the shell's exec", execOf(pid))
	testutil.EventuallyNil(t, func() error {
		s, err := h.p.Stats()
		if err != nil {
			return err
		}
		if s.PlaceErrors <= before.PlaceErrors {
			return fmt.Errorf("place errors %d, want more than %d with %d children and %d places", s.PlaceErrors, before.PlaceErrors, children, cfg.PlaceEntries)
		}
		return nil
	})
	if n := countEntries(t, h.p.objs.ImagePlaces); n > int(cfg.PlaceEntries) {
		t.Errorf("%d places in a map of %d", n, cfg.PlaceEntries)
	}
	release()
	// Every child and the shell exited: their places are gone. Other tasks
	// of the machine may hold a few; far fewer than the map held.
	testutil.EventuallyNil(t, func() error {
		if n := countEntries(t, h.p.objs.ImagePlaces); n > int(cfg.PlaceEntries)/2 {
			return fmt.Errorf("%d places left after the children exited", n)
		}
		return nil
	})
}

func countEntries(t *testing.T, m *ebpf.Map) int {
	t.Helper()
	var k uint64
	var v correlatorImagePlace
	n := 0
	it := m.Iterate()
	for it.Next(&k, &v) {
		n++
	}
	if err := it.Err(); err != nil {
		t.Fatalf("iterating image places: %v", err)
	}
	return n
}
