package main

import (
	"testing"

	"github.com/spf13/pflag"
)

// TestRunHasEveryCaptureFlag: the knobs the docs tell operators to turn
// (--lineage-entries, --scan-budget, ...) exist on the agent, not only on
// `capture`, and mean the same there.
func TestRunHasEveryCaptureFlag(t *testing.T) {
	g := &globalOptions{logLevel: "error"}
	run, capt := newRunCmd(g).Flags(), newCaptureCmd(g).Flags()
	n := 0
	capt.VisitAll(func(f *pflag.Flag) {
		if f.Name == "containers-only" || f.Name == "with-id-only" {
			return // output filters of the capture command
		}
		n++
		rf := run.Lookup(f.Name)
		if rf == nil {
			t.Errorf("run lacks --%s", f.Name)
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

func TestCaptureFlagsNoPin(t *testing.T) {
	c := newCaptureFlags()
	fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
	c.add(fs)
	if err := fs.Parse([]string{"--no-pin", "--lineage-entries", "4096"}); err != nil {
		t.Fatal(err)
	}
	if cfg := c.config(); cfg.PinPath != "" || cfg.LineageEntries != 4096 {
		t.Errorf("config %+v: want no pin path and 4096 lineage entries", cfg)
	}
}
