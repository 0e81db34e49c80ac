package main

import (
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/execid/correlator/pkg/capture"
)

// TestRunHasEveryCaptureFlag: the knobs the docs tell operators to turn
// (--lineage-entries, --scan-budget, ...) exist on the agent, not only on
// `capture`, and mean the same there. Pinning differs, and the flush
// interval's default.
func TestRunHasEveryCaptureFlag(t *testing.T) {
	g := &globalOptions{logLevel: "error"}
	run, capt := newRunCmd(g).Flags(), newCaptureCmd(g).Flags()
	n := 0
	capt.VisitAll(func(f *pflag.Flag) {
		switch f.Name {
		case "containers-only", "with-id-only": // output filters of the capture command
			return
		case "pin", "no-pin": // the agent pins by default, capture only with --pin
			return
		}
		n++
		rf := run.Lookup(f.Name)
		if rf == nil {
			t.Errorf("run lacks --%s", f.Name)
			return
		}
		if f.Name == "flush-interval" {
			// The agent reads the ring less often than a person watching
			// (capture.AgentFlushInterval); the meaning is the same.
			if rf.DefValue != capture.AgentFlushInterval.String() || f.DefValue != capture.Default().FlushInterval.String() ||
				rf.Usage != f.Usage {
				t.Errorf("--flush-interval: run %q (%s), capture %q (%s)", rf.DefValue, rf.Usage, f.DefValue, f.Usage)
			}
			return
		}
		if rf.DefValue != f.DefValue || rf.Usage != f.Usage {
			t.Errorf("--%s differs: run %q (%s), capture %q (%s)", f.Name, rf.DefValue, rf.Usage, f.DefValue, f.Usage)
		}
	})
	if n < 8 {
		t.Errorf("only %d capture flags seen", n)
	}
}

// TestPinningDefaults: the agent pins unless --no-pin; capture pins only
// with --pin, and refuses a --pin-path without it.
func TestPinningDefaults(t *testing.T) {
	cases := []struct {
		name    string
		agent   bool
		args    []string
		pinPath string
		err     string
	}{
		{"run pins", true, nil, capture.DefaultPinPath, ""},
		{"run --no-pin", true, []string{"--no-pin"}, "", ""},
		{"run --pin-path", true, []string{"--pin-path", "/sys/fs/bpf/x"}, "/sys/fs/bpf/x", ""},
		{"capture does not pin", false, nil, "", ""},
		{"capture --no-pin, deprecated", false, []string{"--no-pin"}, "", ""},
		{"capture --pin", false, []string{"--pin"}, capture.DefaultPinPath, ""},
		{"capture --pin --pin-path", false, []string{"--pin", "--pin-path", "/sys/fs/bpf/correlator-test-none"}, "/sys/fs/bpf/correlator-test-none", ""},
		{"capture --pin-path alone", false, []string{"--pin-path", "/sys/fs/bpf/x"}, "", "capture pins only with --pin"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := newCaptureFlags(tc.agent)
			fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
			c.add(fs)
			if err := fs.Parse(append(tc.args, "--lineage-entries", "4096")); err != nil {
				t.Fatal(err)
			}
			if cfg := c.config(); cfg.PinPath != tc.pinPath || cfg.LineageEntries != 4096 {
				t.Errorf("config %+v: want pin path %q and 4096 lineage entries", cfg, tc.pinPath)
			}
			if tc.agent || tc.pinPath == capture.DefaultPinPath {
				return // an agent on this machine may be reading there
			}
			err := capture.CheckPins(c.pin, fs.Changed("pin-path"), c.cfg.PinPath)
			if (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
				t.Errorf("checking pins: %v, want %q", err, tc.err)
			}
		})
	}
}

// TestEveryCommandSaysWhatItLeaves: the help of every command that runs
// says what it leaves in the kernel, in the correlator tree and the
// kubectl plugin's.
func TestEveryCommandSaysWhatItLeaves(t *testing.T) {
	g := &globalOptions{logLevel: "error"}
	root, _ := newRootCmd(g, "correlator", nil, func(string) string { return "" })
	n := 0
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Runnable() && c.Name() != "help" && c.Name() != "completion" {
			n++
			if !strings.Contains(c.Long, kernelHelpPrefix) {
				t.Errorf("%q: its help does not say what it leaves in the kernel (%q)", c.CommandPath(), kernelHelpPrefix)
			}
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	walk(newKubectlCmd(true))
	if n < 14 {
		t.Errorf("only %d commands seen", n)
	}
	for _, c := range []*cobra.Command{newCaptureCmd(g), newRunCmd(g)} {
		if !strings.Contains(c.Long, "pinned") {
			t.Errorf("%s: its help does not say what is pinned", c.Name())
		}
	}
}
