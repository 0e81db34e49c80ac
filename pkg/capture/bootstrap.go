package capture

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/cilium/ebpf"
)

// procInfo is what bootstrap reads of one live process.
type procInfo struct {
	tgid, ppid uint32
	startTicks uint64
	env        []envValue
	pidns      string
	cgroup     []byte
}

// Bootstrap reconciles the lineage map with the live processes in /proc.
// Pinned entries of dead processes are pruned. Live processes whose
// environment carries a key but that have no entry (nothing was pinned, or
// they started while no agent ran) get one with source=procfs. It returns
// one synthetic exec event per entry it added.
func (p *Probe) Bootstrap() ([]Event, error) {
	procs, err := readProcs(p.cfg.ProcRoot, p.cfg.Keys)
	if err != nil {
		return nil, err
	}
	pruned := p.pruneDead(procs)
	var events []Event
	var errs []error
	for tgid, pi := range procs {
		if !anyFound(pi.env) {
			continue
		}
		var existing correlatorLineage
		if p.objs.LineageMap.Lookup(tgid, &existing) == nil {
			continue // the kernel's own record wins
		}
		entry := lineageFromProc(pi, procs)
		if err := p.objs.LineageMap.Update(tgid, &entry, ebpf.UpdateNoExist); err != nil {
			if !errors.Is(err, ebpf.ErrKeyExist) {
				errs = append(errs, fmt.Errorf("storing lineage of pid %d: %w", tgid, err))
			}
			continue
		}
		events = append(events, p.procEvent(pi, &entry))
		if entry.Depth == 0 {
			p.procfsRoots.Add(1)
		}
	}
	ev := p.log.Info()
	if len(events) > 0 {
		ev = p.log.Warn() // provenance the kernel never saw
	}
	ev.Int("pruned", pruned).Int("bootstrapped", len(events)).Bool("resumed", p.resumed).
		Msg("reconciled lineage with procfs: processes found only there are flagged procfs_root")
	return events, errors.Join(errs...)
}

func anyFound(env []envValue) bool {
	for _, v := range env {
		if v.Found {
			return true
		}
	}
	return false
}

// pruneDead drops entries whose process is gone or whose pid was reused.
func (p *Probe) pruneDead(procs map[uint32]*procInfo) int {
	var (
		tgid  uint32
		entry correlatorLineage
		dead  []uint32
	)
	it := p.objs.LineageMap.Iterate()
	for it.Next(&tgid, &entry) {
		pi, ok := procs[tgid]
		if !ok || entry.StartNs/ticksNs != pi.startTicks {
			dead = append(dead, tgid)
		}
	}
	for _, t := range dead {
		_ = p.objs.LineageMap.Delete(t)
	}
	return len(dead)
}

// lineageFromProc builds an entry, finding the session root as the highest
// ancestor that carries the same audit ID.
func lineageFromProc(pi *procInfo, procs map[uint32]*procInfo) correlatorLineage {
	e := correlatorLineage{
		StartNs: pi.startTicks * ticksNs,
		Lflags:  uint32(correlatorLineageFlagLINEAGE_FLAG_COARSE_START),
	}
	root := pi
	for depth := 0; depth < 64; depth++ {
		parent, ok := procs[root.ppid]
		if !ok || !sameIDs(parent.env, pi.env) {
			break
		}
		root = parent
		e.Depth++
	}
	e.RootTgid, e.RootStartNs = root.tgid, root.startTicks*ticksNs
	// /proc cannot say where the image that exec'd the root was loaded, so
	// a procfs root is judged by its parent alone (the kernel's weaker,
	// second test): a parent in the same cgroup set the env. Whatever the
	// parent says, nobody saw this root exec'd: procfs_root says so, and
	// keeps it from ever being a verified member.
	unverified := false
	if parent, ok := procs[root.ppid]; ok {
		unverified = bytes.Equal(parent.cgroup, root.cgroup)
	}
	for k, v := range pi.env {
		if !v.Found || k >= len(e.Ids) {
			continue
		}
		s := &e.Ids[k]
		n := copy(s.Value[:], v.Value)
		s.Len = uint16(n)
		s.Source = uint8(correlatorIdSourceID_SOURCE_PROCFS)
		s.Flags |= uint32(correlatorKeyFlagKEY_FLAG_PROCFS_ROOT)
		if v.Duplicate {
			s.Flags |= uint32(correlatorKeyFlagKEY_FLAG_DUPLICATE_KEY)
		}
		if v.Truncated {
			s.Flags |= uint32(correlatorKeyFlagKEY_FLAG_ID_TRUNCATED)
		}
		if unverified {
			s.Flags |= uint32(correlatorKeyFlagKEY_FLAG_ROOT_UNVERIFIED)
		}
	}
	return e
}

func sameIDs(a, b []envValue) bool {
	if len(a) == 0 || len(b) == 0 {
		return false
	}
	return a[0].Found && b[0].Found && a[0].Value == b[0].Value
}

// procEvent renders a bootstrapped process as an exec event, source=procfs.
func (p *Probe) procEvent(pi *procInfo, e *correlatorLineage) Event {
	var raw correlatorExecEvent
	raw.Tgid, raw.Ppid = pi.tgid, pi.ppid
	raw.StartNs = e.StartNs
	raw.RootTgid, raw.RootStartNs, raw.Depth = e.RootTgid, e.RootStartNs, e.Depth
	ev, _ := p.dec.exec(&raw, &tail{}) // no tail: the image is read from /proc below
	ids := lineageSlots(&e.Ids)
	p.dec.applyKeys(&ev, &ids, nil)
	ev.Time = time.Now().UTC()
	ev.Cgroup, ev.ContainerID, ev.PodUID = parseProcCgroup(pi.cgroup)
	if pp, ok := p.procStart(pi.ppid); ok {
		ev.ParentProcessID = ProcessKey(pi.ppid, pp*ticksNs)
	}
	dir := filepath.Join(p.cfg.ProcRoot, strconv.Itoa(int(pi.tgid)))
	if exe, err := os.Readlink(filepath.Join(dir, "exe")); err == nil {
		ev.Filename = exe
	}
	if cmd, err := os.ReadFile(filepath.Join(dir, "cmdline")); err == nil {
		cmd = bytes.TrimSuffix(cmd, []byte{0}) // one NUL ends each argument
		for _, a := range bytes.Split(cmd, []byte{0}) {
			ev.Argv = append(ev.Argv, string(a))
		}
	}
	return ev
}

// lineageSlots are a lineage entry's keys as the kernel would send them.
func lineageSlots(ids *[maxKeySlots]correlatorIdSlot) [maxKeySlots]slot {
	var out [maxKeySlots]slot
	for k := range ids {
		s := &ids[k]
		if s.Source == uint8(correlatorIdSourceID_SOURCE_NONE) && s.Flags == 0 {
			continue
		}
		out[k] = slot{present: true, value: s.Value[:min(int(s.Len), len(s.Value))], source: s.Source, flags: s.Flags}
	}
	return out
}

func (p *Probe) procStart(pid uint32) (uint64, bool) {
	b, err := os.ReadFile(filepath.Join(p.cfg.ProcRoot, strconv.Itoa(int(pid)), "stat"))
	if err != nil {
		return 0, false
	}
	_, st, err := parseStat(b)
	return st, err == nil
}

// readProcs reads every live process's stat, and the environment, pid
// namespace and cgroup of those that carry a key.
func readProcs(procRoot string, keys []string) (map[uint32]*procInfo, error) {
	ents, err := os.ReadDir(procRoot)
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", procRoot, err)
	}
	procs := make(map[uint32]*procInfo, len(ents))
	for _, de := range ents {
		pid, err := strconv.ParseUint(de.Name(), 10, 32)
		if err != nil {
			continue
		}
		dir := filepath.Join(procRoot, de.Name())
		stat, err := os.ReadFile(filepath.Join(dir, "stat"))
		if err != nil {
			continue // exited meanwhile
		}
		ppid, start, err := parseStat(stat)
		if err != nil {
			continue
		}
		pi := &procInfo{tgid: uint32(pid), ppid: ppid, startTicks: start}
		if env, err := os.ReadFile(filepath.Join(dir, "environ")); err == nil {
			pi.env = parseEnviron(env, keys)
		}
		pi.pidns, _ = os.Readlink(filepath.Join(dir, "ns", "pid"))
		pi.cgroup, _ = os.ReadFile(filepath.Join(dir, "cgroup"))
		procs[uint32(pid)] = pi
	}
	return procs, nil
}
