package capture

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// archSuffix is bpf2go's file suffix for a GOARCH (gen.go: -target
// amd64,arm64).
var archSuffix = map[string]string{"386": "x86", "amd64": "x86", "arm64": "arm64"}

// TestArchObjects: each object is generated per architecture, and the build
// embeds the one of its GOARCH. The x86 and arm64 objects are the same bytes:
// no program reads pt_regs, a syscall number or an arch-only field
// (docs/kernels.md, "Architectures"), so the target define changes nothing.
// When they start to differ, the C has become arch-specific: check that
// bpf/include/vmlinux_min.h declares what each arch needs, then relax the
// comparison here.
func TestArchObjects(t *testing.T) {
	suffix, ok := archSuffix[runtime.GOARCH]
	if !ok {
		t.Fatalf("no BPF object for GOARCH %s (gen.go builds amd64 and arm64)", runtime.GOARCH)
	}
	x86, _ := filepath.Glob("*_x86_bpfel*.o")
	if len(x86) == 0 {
		t.Skip("the generated objects are not beside the test binary (run from pkg/capture)")
	}
	if len(x86) != 4 {
		t.Errorf("x86 objects %v, want 4 (correlator, correlatorcompat and the two test layouts)", x86)
	}
	embedded := map[string][]byte{
		"correlator":                 _CorrelatorBytes,
		"correlatorcompat":           _CorrelatorCompatBytes,
		"correlatortestlayout":       _CorrelatorTestLayoutBytes,
		"correlatortestlayoutcompat": _CorrelatorTestLayoutCompatBytes,
	}
	for _, xf := range x86 {
		af := strings.Replace(xf, "_x86_", "_arm64_", 1)
		x, err := os.ReadFile(xf)
		if err != nil {
			t.Fatal(err)
		}
		a, err := os.ReadFile(af)
		if err != nil {
			t.Fatalf("no arm64 object beside %s: %v", xf, err)
		}
		if !bytes.Equal(x, a) {
			t.Errorf("%s and %s differ: the BPF C now depends on the target arch (see this test's comment)", xf, af)
		}
		stem := xf[:strings.Index(xf, "_x86_")]
		own := strings.Replace(xf, "_x86_", "_"+suffix+"_", 1)
		want, _ := os.ReadFile(own)
		if got, ok := embedded[stem]; !ok {
			t.Errorf("%s: no embedded object for stem %s", xf, stem)
		} else if !bytes.Equal(got, want) {
			t.Errorf("the %s object embedded for GOARCH %s is not %s", stem, runtime.GOARCH, own)
		}
	}
}
