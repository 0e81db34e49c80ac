package main

import (
	"fmt"

	"github.com/spf13/pflag"

	"github.com/execid/correlator/pkg/capture"
)

// captureFlags are the probe's settings, one set for `capture` and `run`
// alike, so every knob the docs tell an operator to turn exists on both.
// Only pinning differs: the agent pins unless --no-pin, so the kernel keeps
// watching between agents; `capture`, run by a person to look, pins only
// with --pin, and otherwise leaves nothing in the kernel when it exits.
type captureFlags struct {
	cfg   capture.Config
	agent bool // the agent's flags
	noPin bool // run's --no-pin (capture's, deprecated, is ignored)
	pin   bool // capture's --pin
}

// newCaptureFlags returns the agent's flags (agent) or the capture
// command's.
func newCaptureFlags(agent bool) *captureFlags {
	if agent {
		return &captureFlags{cfg: capture.AgentDefault(), agent: agent}
	}
	return &captureFlags{cfg: capture.Default(), agent: agent}
}

func (c *captureFlags) add(f *pflag.FlagSet) {
	f.StringSliceVar(&c.cfg.Keys, "keys", c.cfg.Keys, "environment keys to capture; the first is the audit ID key")
	f.Uint32Var(&c.cfg.ScanBudget, "scan-budget", c.cfg.ScanBudget, fmt.Sprintf("environment bytes scanned per exec (max %d)", capture.MaxScanBudget))
	f.StringVar(&c.cfg.PinPath, "pin-path", c.cfg.PinPath, "bpffs directory of the pinned probes and session lineage, which keep running across restarts until correlator uninstall removes them")
	if c.agent {
		f.BoolVar(&c.noPin, "no-pin", false, "do not pin the probes and lineage (state is lost on exit, and nothing is watched while no agent runs)")
	} else {
		f.BoolVar(&c.pin, "pin", false, "pin the probes and lineage under --pin-path as the agent does: they keep running after exit until correlator uninstall removes them (refused while an agent reads probes pinned there)")
		f.BoolVar(&c.noPin, "no-pin", false, "")
		_ = f.MarkDeprecated("no-pin", "capture pins only with --pin")
	}
	f.Uint32Var(&c.cfg.RingBufferBytes, "ring-buffer-bytes", c.cfg.RingBufferBytes, "kernel ring buffer size (power of two)")
	f.Uint32Var(&c.cfg.LineageEntries, "lineage-entries", c.cfg.LineageEntries, "maximum live processes tracked in sessions")
	f.StringVar((*string)(&c.cfg.Object), "bpf-object", string(c.cfg.Object),
		"BPF object: auto (probe the kernel: default on 5.17 and later, compat on 5.10 to 5.16), default or compat; a kernel that cannot load it is refused at start")
	f.Uint32Var(&c.cfg.PlaceEntries, "place-entries", c.cfg.PlaceEntries, "live tasks whose image place the compat object tracks (a full map is counted; those tasks' roots read as unverified)")
	f.StringVar(&c.cfg.ProcRoot, "proc-root", c.cfg.ProcRoot, "path of the host's /proc")
	f.StringVar((*string)(&c.cfg.Scope), "capture-scope", string(c.cfg.Scope), "execs sent by the kernel: pods (in a pod's cgroup, or carrying a session or key) or all (host processes too)")
	f.DurationVar(&c.cfg.FlushInterval, "flush-interval", c.cfg.FlushInterval, "longest an event waits in the kernel ring before it is read")
}

// pinning reports whether the probes are pinned.
func (c *captureFlags) pinning() bool {
	if c.agent {
		return !c.noPin
	}
	return c.pin
}

// config is the probe's configuration as the flags set it: no pin path
// unless pinning.
func (c *captureFlags) config() capture.Config {
	cfg := c.cfg
	if !c.pinning() {
		cfg.PinPath = ""
	}
	return cfg
}
