package capture

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cilium/ebpf"
)

// TestLiveReader: a fresh heartbeat of another process under the pin path
// is a live reader; a stale one, this process's own, or none is not.
func TestLiveReader(t *testing.T) {
	pinPath := testPinPath(t)
	dir := filepath.Join(pinPath, buildDirPrefix+"0123456789abcdef")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, ok := LiveReader(pinPath); ok {
		t.Fatal("a live reader without a heartbeat")
	}
	m, _, err := openHeartbeat(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for _, tc := range []struct {
		name string
		hb   heartbeat
		live bool
	}{
		{"fresh, another process", heartbeat{BootNs: bootNow(), PID: 1}, true},
		{"stale", heartbeat{BootNs: bootNow() - uint64(liveAfter+time.Second), PID: 1}, false},
		{"this process", heartbeat{BootNs: bootNow(), PID: uint32(os.Getpid())}, false},
		{"from the future", heartbeat{BootNs: bootNow() + uint64(time.Hour), PID: 1}, false},
	} {
		if err := m.Update(uint32(0), &tc.hb, ebpf.UpdateAny); err != nil {
			t.Fatal(err)
		}
		r, ok := LiveReader(pinPath)
		if ok != tc.live || (ok && (r.PID != tc.hb.PID || r.Dir != dir)) {
			t.Errorf("%s: reader %+v %v, want live %v", tc.name, r, ok, tc.live)
		}
	}
	if _, ok := LiveReader(filepath.Join(pinPath, "none")); ok {
		t.Error("a live reader under a missing pin path")
	}
}
