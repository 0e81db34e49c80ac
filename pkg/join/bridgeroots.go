package join

import (
	"slices"

	"github.com/execid/correlator/pkg/capture"
	"github.com/execid/correlator/pkg/vocab"
)

// The exec bridge's roots: an exec's, whose ID the kernel took from the
// argv the runtime exec'd, and a debug container's, whose ID is in the env
// of the spec the bridge wrote.

// isBridgeRoot: the kernel took p's bridge ID from a runtime-exec'd argv,
// or p is the init of a container the runtime started with the ID in its
// env (kubectl debug's ephemeral container, see ephemeralInit).
func isBridgeRoot(p *proc) bool {
	b := &p.in.Bridge
	return b.Value != "" && b.Source == vocab.SourceEnv && (!slices.Contains(b.Flags, vocab.FlagRootUnverified) || ephemeralInit(p))
}

// ephemeralInit: p is a container's first process, started by the runtime
// as its pid namespace's init (container_init, never exec'd into the pod),
// with the bridge's ID in the env of its spec alone (never bridge_argv:
// an exec's ID). The bridge writes that env into kubectl debug's ephemeral
// container on the audited pods/ephemeralcontainers request; any other
// container's env is its pod author's, which is why such a root fits only
// an ephemeral container request naming its own container (fits).
func ephemeralInit(p *proc) bool {
	b := &p.in.Bridge
	return b.Value != "" && b.Source == vocab.SourceEnv && p.in.Container != "" &&
		!slices.Contains(b.Flags, vocab.FlagBridgeArgv) && p.origin() == capture.OriginContainerInit
}
