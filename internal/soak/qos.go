package soak

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/execid/correlator/internal/testutil"
)

// The kubelet's CPU shares for a node's QoS classes (cgroup v1 cpu.shares;
// v2 cpu.weight by the same conversion): all pods share the node's CPUs
// against the system's processes, best-effort pods share 2 between
// them, a burstable pod gets its request in millicores (the chart's 50m:
// 51), and the burstable class the sum of its pods' requests. Without this
// the load's containers and the agent sat in sibling cgroups of equal
// weight, and a nice value on the load changed nothing between them.
const (
	bestEffortShares = 2
	agentShares      = 51 // the chart's request, 50m: 50*1024/1000, rounded up
	agentCgroup      = "/kubepods/burstable/pod-correlator-soak"
)

// QoS is where the soak puts the load (BestEffort pods) and the agent (the
// DaemonSet's Burstable pod), with the kubelet's shares.
type QoS struct {
	// LoadQoS is the load containers' kubepods class (ContainerConfig.QoS).
	LoadQoS string
	// AgentProcs lists the cgroup.procs files each agent's PID is written
	// to once it starts.
	AgentProcs []string
	// Describe says what was set up, for the log.
	Describe string
}

// KubeletQoS makes the kubepods classes with the kubelet's CPU shares and
// the agent's pod cgroup, in the v1 cpu hierarchy where there is one, else
// in cgroup v2 with cpu enabled down to them. The test removes them.
func KubeletQoS(t testing.TB) (QoS, error) {
	v1, err := testutil.CgroupHierarchy("cpu")
	if err != nil {
		return QoS{}, err
	}
	if v1 != "" {
		for path, shares := range map[string]int{"/kubepods": kubepodsShares(), "/kubepods/besteffort": bestEffortShares,
			"/kubepods/burstable": agentShares, agentCgroup: agentShares} {
			dir := testutil.NewCgroup(t, v1, path)
			if err := writeCgroup(dir, "cpu.shares", strconv.Itoa(shares)); err != nil {
				return QoS{}, err
			}
		}
		return QoS{LoadQoS: "besteffort", AgentProcs: []string{filepath.Join(v1, agentCgroup, "cgroup.procs")},
			Describe: fmt.Sprintf("cgroup v1 cpu.shares: load besteffort %d, agent burstable %d", bestEffortShares, agentShares)}, nil
	}
	v2, err := testutil.CgroupHierarchy("")
	if err != nil || v2 == "" {
		return QoS{}, fmt.Errorf("finding a cgroup hierarchy with cpu (v1 %q, v2 %q): %v", v1, v2, err)
	}
	for _, path := range []string{"/kubepods/besteffort", agentCgroup} {
		testutil.NewCgroup(t, v2, path)
	}
	// cpu enabled from the root down, so each class's weight counts.
	for _, parent := range []string{"/", "/kubepods", "/kubepods/burstable"} {
		if err := writeCgroup(filepath.Join(v2, parent), "cgroup.subtree_control", "+cpu"); err != nil {
			return QoS{}, err
		}
	}
	for path, shares := range map[string]int{"/kubepods": kubepodsShares(), "/kubepods/besteffort": bestEffortShares,
		"/kubepods/burstable": agentShares, agentCgroup: agentShares} {
		if err := writeCgroup(filepath.Join(v2, path), "cpu.weight", strconv.Itoa(weightOf(shares))); err != nil {
			return QoS{}, err
		}
	}
	return QoS{LoadQoS: "besteffort", AgentProcs: []string{filepath.Join(v2, agentCgroup, "cgroup.procs")},
		Describe: fmt.Sprintf("cgroup v2 cpu.weight: load besteffort %d, agent burstable %d",
			weightOf(bestEffortShares), weightOf(agentShares))}, nil
}

// kubepodsShares is the kubelet's for all pods: the node's CPUs.
func kubepodsShares() int { return runtime.NumCPU() * 1024 }

// weightOf is the kubelet's (and runc's) cpu.shares to cpu.weight.
func weightOf(shares int) int { return 1 + ((shares-2)*9999)/262142 }

func writeCgroup(dir, file, value string) error {
	if err := os.WriteFile(filepath.Join(dir, file), []byte(value), 0); err != nil {
		return fmt.Errorf("setting %s in %s to %s: %w", file, dir, strings.TrimSpace(value), err)
	}
	return nil
}
