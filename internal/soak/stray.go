package soak

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// A soak measures a node on which it is the only load. One killed before
// its cleanup (kill -9, a closed terminal) leaves its agent running with
// its probes attached, and its pins: the next soak's every exec then ran
// two agents' probes and its queries met another agent's writes (four
// 10-minute runs here, p99 14.9 to 17.5 ms, before the stray was found).
// So a soak refuses to start beside one, naming it. The tests' shared
// Elasticsearch cluster (internal/escluster) outlives the tests that
// started it: three JVMs with their collectors and merges, found beside an
// hour after a test run here. A run long enough to judge its latency
// refuses to start beside a node; a short one (make test's, which runs
// beside the cluster on purpose) says it ran beside one.

// soakPinPrefix begins every soak's pin path; the PID of its test follows.
const soakPinPrefix = "/sys/fs/bpf/correlator-soak-"

// soakPinOf is the soak pin path a command line (NUL-separated, as
// /proc/PID/cmdline) passes to --pin-path, if any.
func soakPinOf(cmdline []byte) (string, bool) {
	args := strings.Split(strings.TrimSuffix(string(cmdline), "\x00"), "\x00")
	for i, a := range args {
		var pin string
		switch {
		case a == "--pin-path" && i+1 < len(args):
			pin = args[i+1]
		case strings.HasPrefix(a, "--pin-path="):
			pin = strings.TrimPrefix(a, "--pin-path=")
		default:
			continue
		}
		if strings.HasPrefix(pin, soakPinPrefix) {
			return pin, true
		}
	}
	return "", false
}

// esNode reports whether a command line is an Elasticsearch node's JVM.
func esNode(cmdline []byte) bool {
	for a := range strings.SplitSeq(string(cmdline), "\x00") {
		if strings.HasPrefix(a, "-Des.path.home=") {
			return true
		}
	}
	return false
}

// neighbours lists, under proc (/proc), the processes running with a
// soak's pins, as "PID (pins)", and the Elasticsearch nodes' PIDs.
func neighbours(proc string) (agents, es []string, err error) {
	ents, err := os.ReadDir(proc)
	if err != nil {
		return nil, nil, fmt.Errorf("listing processes for an earlier soak's agent: %w", err)
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join(proc, e.Name(), "cmdline"))
		if err != nil {
			continue // gone meanwhile, or a kernel thread's
		}
		if pin, ok := soakPinOf(b); ok {
			agents = append(agents, fmt.Sprintf("%d (%s)", pid, pin))
		} else if esNode(b) {
			es = append(es, strconv.Itoa(pid))
		}
	}
	return agents, es, nil
}

// checkQuiet refuses a soak beside an earlier one's agent or pins, or,
// judged (a long run), beside an Elasticsearch node; it runs before this
// soak starts any. It returns the nodes a short run runs beside.
func checkQuiet(judged bool) (es []string, err error) {
	agents, es, err := neighbours("/proc")
	if err != nil {
		return nil, err
	}
	if pins, _ := filepath.Glob(soakPinPrefix + "*"); len(agents) > 0 || len(pins) > 0 {
		return nil, fmt.Errorf("starting the soak: an earlier soak's agents (%s) or pins (%s) are here, and their probes would run "+
			"on this soak's every exec: kill the agents and remove the pins", listOrNone(agents), listOrNone(pins))
	}
	if judged && len(es) > 0 {
		return nil, fmt.Errorf("starting the soak: Elasticsearch nodes (PIDs %s) are running beside it and would weigh on "+
			"its figures: `go run ./internal/escluster/cmd/escluster down` stops the tests' cluster", strings.Join(es, ", "))
	}
	return es, nil
}

func listOrNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}
