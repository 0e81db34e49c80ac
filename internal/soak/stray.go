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
// So a soak refuses to start beside one, naming it.

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

// strayAgents lists, under proc (/proc), the processes running with a
// soak's pins, as "PID (pins)".
func strayAgents(proc string) ([]string, error) {
	ents, err := os.ReadDir(proc)
	if err != nil {
		return nil, fmt.Errorf("listing processes for an earlier soak's agent: %w", err)
	}
	var stray []string
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
			stray = append(stray, fmt.Sprintf("%d (%s)", pid, pin))
		}
	}
	return stray, nil
}

// checkQuiet refuses a soak beside an earlier one's agent or pins (it runs
// before this soak starts any).
func checkQuiet() error {
	stray, err := strayAgents("/proc")
	if err != nil {
		return err
	}
	pins, _ := filepath.Glob(soakPinPrefix + "*")
	if len(stray) == 0 && len(pins) == 0 {
		return nil
	}
	return fmt.Errorf("starting the soak: an earlier soak's agents (%s) or pins (%s) are here, and their probes would run "+
		"on this soak's every exec: kill the agents and remove the pins", listOrNone(stray), listOrNone(pins))
}

func listOrNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}
