package capture

import (
	"bytes"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/features"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"

	"github.com/execid/correlator/internal/testutil"
)

// verifierTail is how much of a refusal's log the test prints.
const verifierTail = 150

// processedRe is the verifier's summary line (every kernel since 5.2).
var processedRe = regexp.MustCompile(`processed (\d+) insns \(limit \d+\)[^\n]*`)

// TestKernelVerifierStats loads the shipped object with the default
// configuration, as `correlator capture` does, and logs per program the
// verifier's summary ("processed N insns ..."). On a rejection it fails with
// the whole verifier log. scripts/e2e-kernels runs it in every guest of the
// kernel matrix and collects the "verifier:" lines.
func TestKernelVerifierStats(t *testing.T) {
	testutil.RequireRoot(t)
	if err := Preflight(); err != nil {
		t.Fatal(err)
	}
	if err := rlimit.RemoveMemlock(); err != nil {
		t.Fatalf("removing memlock rlimit: %v", err)
	}
	spec, err := ebpf.LoadCollectionSpecFromReader(bytes.NewReader(_CorrelatorBytes))
	if err != nil {
		t.Fatalf("loading BPF spec: %v", err)
	}
	if err := configureSpec(spec, Default()); err != nil {
		t.Fatal(err)
	}
	for _, m := range spec.Maps {
		m.Pinning = ebpf.PinNone
	}
	coll, err := ebpf.NewCollectionWithOptions(spec, ebpf.CollectionOptions{
		Programs: ebpf.ProgramOptions{LogLevel: ebpf.LogLevelStats, LogSizeStart: 1 << 16},
	})
	var verr *ebpf.VerifierError
	if errors.As(err, &verr) {
		// Again with the path walked: the stats alone do not say where. The
		// log's end holds the refused instruction and its source line.
		_, err = ebpf.NewCollectionWithOptions(spec, ebpf.CollectionOptions{
			Programs: ebpf.ProgramOptions{LogLevel: ebpf.LogLevelBranch | ebpf.LogLevelStats, LogSizeStart: 1 << 24},
		})
		if errors.As(err, &verr) {
			t.Fatalf("loading BPF objects (the verifier log's last %d lines): %-[1]*[2]v", verifierTail, verr)
		}
	}
	if err != nil {
		t.Fatalf("loading BPF objects: %v", err)
	}
	defer coll.Close()

	names := make([]string, 0, len(coll.Programs))
	for name := range coll.Programs {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		p := coll.Programs[name]
		line := processedRe.FindString(p.VerifierLog)
		if line == "" {
			line = "no summary in the log: " + lastLine(p.VerifierLog)
		}
		t.Logf("verifier: %s: %s", name, line)
	}
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// TestKernelFeatures probes the running kernel for each map type the object
// declares and each helper its programs call (cilium/ebpf's features), and
// fails naming what the kernel lacks: on a kernel the object does not load
// on, it says why beyond the first error.
func TestKernelFeatures(t *testing.T) {
	testutil.RequireRoot(t)
	spec, err := ebpf.LoadCollectionSpecFromReader(bytes.NewReader(_CorrelatorBytes))
	if err != nil {
		t.Fatalf("loading BPF spec: %v", err)
	}
	var release string
	var uts unix.Utsname
	if unix.Uname(&uts) == nil {
		release = unix.ByteSliceToString(uts.Release[:])
	}
	seenMap := map[ebpf.MapType]bool{}
	for _, name := range sortedKeys(spec.Maps) {
		mt := spec.Maps[name].Type
		if seenMap[mt] {
			continue
		}
		seenMap[mt] = true
		if err := features.HaveMapType(mt); err != nil {
			t.Errorf("feature: %s lacks map type %s (map %s): %v", release, mt, name, err)
		}
	}
	type use struct {
		pt ebpf.ProgramType
		fn asm.BuiltinFunc
	}
	seenFn := map[use]bool{}
	for _, name := range sortedKeys(spec.Programs) {
		p := spec.Programs[name]
		for _, ins := range p.Instructions {
			switch {
			case ins.IsBuiltinCall():
				u := use{p.Type, asm.BuiltinFunc(ins.Constant)}
				if seenFn[u] {
					continue
				}
				seenFn[u] = true
				if err := haveHelper(p, u.fn); err != nil {
					t.Errorf("feature: %s lacks helper %s for %s programs (first in %s): %v", release, u.fn, u.pt, name, err)
				}
			case ins.IsKfuncCall():
				t.Logf("feature: %s calls a kfunc (not probed)", name)
			}
		}
	}
	t.Logf("feature: %s: %d map types, %d helpers probed", release, len(seenMap), len(seenFn))
}

// haveHelper loads a program of p's type and attach point that calls fn
// with its arguments unset: a kernel without the helper refuses the call
// itself ("unknown func"), one with it refuses the unset arguments.
// (features.HaveProgramHelper has no probe for tracing programs.)
func haveHelper(p *ebpf.ProgramSpec, fn asm.BuiltinFunc) error {
	prog, err := ebpf.NewProgramWithOptions(&ebpf.ProgramSpec{
		Type:       p.Type,
		AttachType: p.AttachType,
		AttachTo:   p.AttachTo,
		License:    "GPL",
		Instructions: asm.Instructions{
			fn.Call(),
			asm.LoadImm(asm.R0, 0, asm.DWord),
			asm.Return(),
		},
	}, ebpf.ProgramOptions{LogLevel: ebpf.LogLevelBranch})
	if err == nil {
		prog.Close()
		return nil
	}
	var verr *ebpf.VerifierError
	if !errors.As(err, &verr) {
		return fmt.Errorf("probing: %w", err)
	}
	for _, l := range verr.Log {
		if strings.Contains(l, "unknown func") || strings.Contains(l, "invalid func") {
			return errors.New(l)
		}
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
