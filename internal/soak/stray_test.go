package soak

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestSoakPinOf(t *testing.T) {
	for _, c := range []struct {
		cmdline string
		pin     string
	}{
		{"/tmp/correlator\x00run\x00--listen\x00127.0.0.1:1\x00--pin-path\x00/sys/fs/bpf/correlator-soak-42\x00--retention\x002m\x00", "/sys/fs/bpf/correlator-soak-42"},
		{"correlator\x00run\x00--pin-path=/sys/fs/bpf/correlator-soak-7\x00", "/sys/fs/bpf/correlator-soak-7"},
		// The controls: a node's own agent, a flag without its value, the
		// path elsewhere on the line.
		{"correlator\x00run\x00--pin-path\x00/sys/fs/bpf/correlator\x00", ""},
		{"correlator\x00run\x00--pin-path\x00", ""},
		{"ls\x00/sys/fs/bpf/correlator-soak-42\x00", ""},
		{"", ""},
	} {
		pin, ok := soakPinOf([]byte(c.cmdline))
		if pin != c.pin || ok != (c.pin != "") {
			t.Errorf("soakPinOf(%q) = %q, %v; want %q", c.cmdline, pin, ok, c.pin)
		}
	}
}

// TestStrayAgents: over a /proc written here, the processes with a soak's
// pins are named and the others (a node's agent, a kernel thread's empty
// line, what is not a PID) are not.
func TestStrayAgents(t *testing.T) {
	proc := t.TempDir()
	for pid, cmdline := range map[string]string{
		"11057": "/tmp/c.bin\x00run\x00--pin-path\x00/sys/fs/bpf/correlator-soak-11019\x00",
		"12":    "correlator\x00run\x00--pin-path\x00/sys/fs/bpf/correlator\x00",
		"2":     "",
		"self":  "/tmp/c.bin\x00run\x00--pin-path\x00/sys/fs/bpf/correlator-soak-1\x00",
	} {
		if err := os.MkdirAll(filepath.Join(proc, pid), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(proc, pid, "cmdline"), []byte(cmdline), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(proc, "99"), 0o755); err != nil { // exited: no cmdline
		t.Fatal(err)
	}
	got, err := strayAgents(proc)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"11057 (/sys/fs/bpf/correlator-soak-11019)"}; !slices.Equal(got, want) {
		t.Errorf("strayAgents = %q, want %q", got, want)
	}
	if _, err := strayAgents(filepath.Join(proc, "nothing")); err == nil {
		t.Error("an unreadable /proc was not an error")
	}
}
