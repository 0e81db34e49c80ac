package soak

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
)

// nodeCPU is the node's CPU time from /proc/stat's first line, in clock
// ticks summed over its CPUs: what tells a busier node (its other work,
// or the hypervisor's) from the agent's own change between two hours.
type nodeCPU struct {
	total int64 // every field but guest and guest_nice, which user and nice hold already
	idle  int64 // idle and iowait: a CPU with nothing to run
	steal int64 // the hypervisor ran something else on this VM's CPUs
}

// readNodeCPU reads /proc/stat.
func readNodeCPU() (nodeCPU, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return nodeCPU{}, fmt.Errorf("reading the node's CPU times: %w", err)
	}
	return parseProcStat(b)
}

// parseProcStat reads the aggregate "cpu" line: user nice system idle
// iowait irq softirq steal, then guest and guest_nice (kernels from 2.6.33;
// at least the first eight are required).
func parseProcStat(b []byte) (nodeCPU, error) {
	line, _, _ := bytes.Cut(b, []byte("\n"))
	f := bytes.Fields(line)
	if len(f) == 0 || string(f[0]) != "cpu" {
		return nodeCPU{}, fmt.Errorf("parsing /proc/stat: the first line is not the aggregate cpu line")
	}
	f = f[1:]
	if len(f) < 8 {
		return nodeCPU{}, fmt.Errorf("parsing /proc/stat: %d cpu fields, want at least 8", len(f))
	}
	var v [8]int64
	for i := range v {
		n, err := strconv.ParseInt(string(f[i]), 10, 64)
		if err != nil || n < 0 {
			return nodeCPU{}, fmt.Errorf("parsing /proc/stat: cpu field %d %q", i+1, f[i])
		}
		v[i] = n
	}
	var c nodeCPU
	for _, n := range v {
		if c.total > (1<<62)-n {
			return nodeCPU{}, fmt.Errorf("parsing /proc/stat: cpu times overflow")
		}
		c.total += n
	}
	c.idle, c.steal = v[3]+v[4], v[7]
	return c, nil
}

// nodeShares is the share of the node's CPU time that was busy (neither
// idle nor stolen) and stolen between two readings; ok is false when no
// time passed or a counter went back.
func nodeShares(prev, cur nodeCPU) (busy, steal float64, ok bool) {
	dt, di, ds := cur.total-prev.total, cur.idle-prev.idle, cur.steal-prev.steal
	if dt <= 0 || di < 0 || ds < 0 || di+ds > dt {
		return 0, 0, false
	}
	return float64(dt-di-ds) / float64(dt), float64(ds) / float64(dt), true
}
