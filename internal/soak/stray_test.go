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
// pins and an Elasticsearch node are named and the others (a node's agent,
// another JVM, a kernel thread's empty line, what is not a PID) are not.
func TestStrayAgents(t *testing.T) {
	proc := t.TempDir()
	for pid, cmdline := range map[string]string{
		"11057": "/tmp/c.bin\x00run\x00--pin-path\x00/sys/fs/bpf/correlator-soak-11019\x00",
		"12":    "correlator\x00run\x00--pin-path\x00/sys/fs/bpf/correlator\x00",
		"2":     "",
		"self":  "/tmp/c.bin\x00run\x00--pin-path\x00/sys/fs/bpf/correlator-soak-1\x00",
		"30950": "/usr/lib/jvm/java-17-openjdk-amd64/bin/java\x00-Xss1m\x00-Des.path.home=/var/cache/correlator/elasticsearch/elasticsearch-8.19.8\x00-m\x00org.elasticsearch.server/org.elasticsearch.bootstrap.Elasticsearch\x00",
		"40":    "/usr/bin/java\x00-Dfoo=-Des.path.home=x\x00-jar\x00app.jar\x00", // a JVM that is not a node
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
	agents, es, err := neighbours(proc)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"11057 (/sys/fs/bpf/correlator-soak-11019)"}; !slices.Equal(agents, want) {
		t.Errorf("neighbours' agents = %q, want %q", agents, want)
	}
	if want := []string{"30950"}; !slices.Equal(es, want) {
		t.Errorf("neighbours' Elasticsearch nodes = %q, want %q", es, want)
	}
	if _, _, err := neighbours(filepath.Join(proc, "nothing")); err == nil {
		t.Error("an unreadable /proc was not an error")
	}
}
