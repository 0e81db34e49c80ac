package capture

import (
	"bytes"
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/rlimit"

	"github.com/execid/correlator/internal/testutil"
)

// verifierTail is how much of a refusal's log the test prints.
const verifierTail = 150

// processedRe is the verifier's summary line (every kernel since 5.2).
var processedRe = regexp.MustCompile(`processed (\d+) insns \(limit \d+\)[^\n]*`)

// TestKernelVerifierStats loads each shipped object this kernel can load
// (object.go: the default one from 5.17, the compat one from 5.10) with the
// default configuration, as `correlator capture` does, and logs per object
// and program the verifier's summary ("processed N insns ..."). The object
// Load would choose must load; on a rejection it fails with the end of the
// verifier log. scripts/e2e-kernels runs it in every guest of the kernel
// matrix and collects the "verifier:" lines.
func TestKernelVerifierStats(t *testing.T) {
	testutil.RequireRoot(t)
	if err := Preflight(); err != nil {
		t.Fatal(err)
	}
	if err := rlimit.RemoveMemlock(); err != nil {
		t.Fatalf("removing memlock rlimit: %v", err)
	}
	chosen, err := chooseBuild(ObjectAuto)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("verifier: %s: object %s chosen", kernelRelease(), chosen.name)
	for _, b := range []build{defaultBuild(), compatBuild()} {
		if err := missingFeatures(b.obj); err != nil {
			t.Logf("verifier: %s: not loadable here: %v", b.name, err)
			continue
		}
		verifierStats(t, b)
	}
}

func verifierStats(t *testing.T, b build) {
	spec, err := ebpf.LoadCollectionSpecFromReader(bytes.NewReader(b.obj))
	if err != nil {
		t.Fatalf("loading BPF spec %s: %v", b.name, err)
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
			t.Fatalf("loading BPF objects %s (the verifier log's last %d lines): %-[2]*[3]v", b.name, verifierTail, verr)
		}
	}
	if err != nil {
		t.Fatalf("loading BPF objects %s: %v", b.name, err)
	}
	defer coll.Close()

	for _, name := range sortedKeys(coll.Programs) {
		p := coll.Programs[name]
		line := processedRe.FindString(p.VerifierLog)
		if line == "" {
			line = "no summary in the log: " + lastLine(p.VerifierLog)
		}
		t.Logf("verifier: %s: %s: %s", b.name, name, line)
	}
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// TestKernelFeatures probes the running kernel for each map type each
// shipped object declares and each helper its programs call (object.go's
// missingFeatures), logs what each lacks, and fails when the kernel lacks
// something the object Load chooses needs: on a kernel no object loads on,
// it says why beyond the first error.
func TestKernelFeatures(t *testing.T) {
	testutil.RequireRoot(t)
	for _, b := range []build{defaultBuild(), compatBuild()} {
		if err := missingFeatures(b.obj); err != nil {
			t.Logf("feature: %s: %s: %v", kernelRelease(), b.name, err)
		} else {
			t.Logf("feature: %s: %s: everything it uses is here", kernelRelease(), b.name)
		}
	}
	b, err := chooseBuild(ObjectAuto)
	if err != nil {
		t.Fatalf("feature: %v", err)
	}
	t.Logf("feature: %s: chosen object %s", kernelRelease(), b.name)
}
