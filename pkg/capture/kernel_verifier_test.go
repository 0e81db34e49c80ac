package capture

import (
	"bytes"
	"errors"
	"regexp"
	"sort"
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
