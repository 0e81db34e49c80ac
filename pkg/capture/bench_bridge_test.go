package capture

import (
	"os/exec"
	"testing"

	"github.com/execid/correlator/pkg/vocab"
)

// BenchmarkBridgeSessionStart: what the exec bridge adds to starting a
// session. The runtime execs `env CORRELATOR_EXEC_ID=<id> <command>`, and
// env execs the command in place: one more exec per session (not per
// command run in it), and the kernel reading that root's argv. Each side
// forks and execs the command the way a runtime starts a session root, with
// the probes attached or not; bridged minus direct is the bridge's cost.
func BenchmarkBridgeSessionStart(b *testing.B) {
	target := overheadTarget(b)
	env, err := exec.LookPath("env")
	if err != nil {
		b.Fatalf("finding env: %v", err)
	}
	id := vocab.BridgeKey + "=7f1c0d2e-0000-4000-8000-0000000000a1"
	sides := []struct {
		name string
		argv []string
	}{
		{"direct", []string{target}},
		{"bridged", []string{env, id, target}},
	}
	for _, probes := range []bool{false, true} {
		var p *Probe
		if probes {
			p, _, _ = benchProbe(b)
			if err := p.Attach(); err != nil {
				b.Fatal(err)
			}
		}
		for _, s := range sides {
			name := s.name + "/probes=" + map[bool]string{false: "off", true: "on"}[probes]
			b.Run(name, func(b *testing.B) {
				for b.Loop() {
					forkExecWait(b, s.argv, []string{"PATH=/usr/bin:/bin"})
				}
			})
		}
		if p != nil {
			p.Detach()
		}
	}
}
