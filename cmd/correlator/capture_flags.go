package main

import (
	"fmt"

	"github.com/spf13/pflag"

	"github.com/execid/correlator/pkg/capture"
)

// captureFlags are the probe's settings, one set for `capture` and `run`
// alike, so every knob the docs tell an operator to turn exists on both.
type captureFlags struct {
	cfg   capture.Config
	noPin bool
}

func newCaptureFlags() *captureFlags { return &captureFlags{cfg: capture.Default()} }

func (c *captureFlags) add(f *pflag.FlagSet) {
	f.StringSliceVar(&c.cfg.Keys, "keys", c.cfg.Keys, "environment keys to capture; the first is the audit ID key")
	f.Uint32Var(&c.cfg.ScanBudget, "scan-budget", c.cfg.ScanBudget, fmt.Sprintf("environment bytes scanned per exec (max %d)", capture.MaxScanBudget))
	f.StringVar(&c.cfg.PinPath, "pin-path", c.cfg.PinPath, "bpffs directory that keeps the probes running and session lineage across restarts (remove with `correlator uninstall`)")
	f.BoolVar(&c.noPin, "no-pin", false, "do not pin the probes and lineage (state is lost on exit, and nothing is watched while no agent runs)")
	f.Uint32Var(&c.cfg.RingBufferBytes, "ring-buffer-bytes", c.cfg.RingBufferBytes, "kernel ring buffer size (power of two)")
	f.Uint32Var(&c.cfg.LineageEntries, "lineage-entries", c.cfg.LineageEntries, "maximum live processes tracked in sessions")
	f.StringVar(&c.cfg.ProcRoot, "proc-root", c.cfg.ProcRoot, "path of the host's /proc")
	f.StringVar((*string)(&c.cfg.Scope), "capture-scope", string(c.cfg.Scope), "execs sent by the kernel: pods (in a pod's cgroup, or carrying a session or key) or all (host processes too)")
	f.DurationVar(&c.cfg.FlushInterval, "flush-interval", c.cfg.FlushInterval, "longest an event waits in the kernel ring before it is read")
}

// config is the probe's configuration as the flags set it.
func (c *captureFlags) config() capture.Config {
	cfg := c.cfg
	if c.noPin {
		cfg.PinPath = ""
	}
	return cfg
}
