package capture

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/execid/correlator/pkg/vocab"
)

// Kernel limits that bound the configuration.
const (
	maxKeys        = 4       // MAX_KEYS in bpf/include/correlator.h
	maxKeyLen      = 64      // KEY_MAX_LEN
	MaxScanBudget  = 6 << 20 // execve's cap on argv+envp: 3/4 of the 8 MiB _STK_LIM
	minScanBudget  = 4 << 10 // below this a scan proves nothing
	DefaultPinPath = "/sys/fs/bpf/correlator"
)

// Scope says which execs the kernel sends.
type Scope string

const (
	// ScopePods sends the execs in a pod's cgroup (a "kubepods" ancestor)
	// and those carrying lineage or a key; host processes with neither are
	// counted and skipped, their argv never read.
	ScopePods Scope = "pods"
	// ScopeAll sends every exec.
	ScopeAll Scope = "all"
)

// Config configures the probe. Start from Default and call Validate.
type Config struct {
	// Keys are the environment keys to capture; Keys[0] is the audit ID key.
	Keys []string
	// BridgeKey is the key the exec bridge puts in a covered exec's argv
	// (`env KEY=<id> <command>`): when it is one of Keys, a root's value
	// comes from that argv, and from the environment alone it is only a
	// claim (root_unverified).
	BridgeKey string
	// ScanBudget bounds the environment bytes scanned per exec.
	ScanBudget uint32
	// PinPath is the bpffs directory holding each build's pinned probes,
	// ring, counters and lineage (pins.go), so the kernel keeps watching
	// while no agent runs; empty disables pinning (one-shot runs).
	PinPath string
	// RingBufferBytes sizes the kernel-to-userspace ring (a power of two).
	RingBufferBytes uint32
	// LineageEntries caps the live processes tracked in sessions.
	LineageEntries uint32
	// PlaceEntries caps the live tasks whose image place the compat object
	// keeps (object.go); a task beyond it is counted (PlaceErrors) and its
	// roots read as unverified. The default object's task storage has no cap.
	PlaceEntries uint32
	// ProcRoot is /proc, or /host/proc in a DaemonSet.
	ProcRoot string
	// FlushInterval bounds how long an event may wait in the ring: the
	// kernel wakes the reader only when WakeupBytes have queued, because a
	// wakeup per exec costs the exec'ing task more than the probe itself.
	// WakeupBytes is capped at a quarter of the ring, so a burst wakes the
	// reader long before the ring is full.
	FlushInterval time.Duration
	WakeupBytes   uint32
	// Scope selects the execs sent (ScopePods by default).
	Scope Scope
	// Object selects the BPF object (ObjectAuto by default: probe the
	// kernel); forcing one the kernel cannot load fails Load, naming the
	// kernel and what it lacks.
	Object Object
}

// AgentFlushInterval is the agent's FlushInterval (`correlator run`). Every
// drain wakes three goroutines (the reader, the joiner's loop, the store
// writer), which cost the agent 10 to 17 % of its CPU at 300 execs/s on
// this project's VM with a 100 ms interval (docs/benchmarks.md). The
// agent's rows wait up to a second for their commit anyway: a row is
// queryable within 1.5 s instead of 1.1, an alert leaves within half a
// second. `correlator capture`, which a person watches, keeps 100 ms.
const AgentFlushInterval = 500 * time.Millisecond

// AgentDefault is Default with the agent's FlushInterval.
func AgentDefault() Config {
	c := Default()
	c.FlushInterval = AgentFlushInterval
	return c
}

// Default returns the configuration correlator ships with.
func Default() Config {
	return Config{
		Keys:            []string{vocab.AuditIDKey, vocab.SPOKey},
		BridgeKey:       vocab.BridgeKey,
		ScanBudget:      1 << 20,
		PinPath:         DefaultPinPath,
		RingBufferBytes: 16 << 20,
		LineageEntries:  16384,
		PlaceEntries:    65536,
		ProcRoot:        "/proc",
		FlushInterval:   100 * time.Millisecond,
		WakeupBytes:     256 << 10,
		Scope:           ScopePods,
		Object:          ObjectAuto,
	}
}

// Validate reports the first problem with c.
func (c Config) Validate() error {
	if len(c.Keys) == 0 || len(c.Keys) > maxKeys {
		return fmt.Errorf("validating keys: need 1 to %d keys, got %d", maxKeys, len(c.Keys))
	}
	seen := map[string]bool{}
	for _, k := range c.Keys {
		if err := validateKey(k); err != nil {
			return err
		}
		if seen[k] {
			return fmt.Errorf("validating key %q: listed twice", k)
		}
		seen[k] = true
	}
	if c.ScanBudget < minScanBudget || c.ScanBudget > MaxScanBudget {
		return fmt.Errorf("validating scan budget %d: must be between %d and %d bytes", c.ScanBudget, minScanBudget, MaxScanBudget)
	}
	if c.RingBufferBytes < 1<<16 || c.RingBufferBytes&(c.RingBufferBytes-1) != 0 {
		return fmt.Errorf("validating ring buffer size %d: must be a power of two of at least 64 KiB", c.RingBufferBytes)
	}
	if c.LineageEntries < 64 {
		return fmt.Errorf("validating lineage entries %d: must be at least 64", c.LineageEntries)
	}
	if c.PlaceEntries < 64 {
		return fmt.Errorf("validating place entries %d: must be at least 64", c.PlaceEntries)
	}
	if c.PinPath != "" && !filepath.IsAbs(c.PinPath) {
		return fmt.Errorf("validating pin path %q: must be absolute", c.PinPath)
	}
	if c.FlushInterval < time.Millisecond || c.FlushInterval > time.Minute {
		return fmt.Errorf("validating flush interval %s: must be between 1ms and 1m", c.FlushInterval)
	}
	if c.WakeupBytes == 0 {
		return errors.New("validating wakeup bytes: must be positive")
	}
	if c.Scope != ScopePods && c.Scope != ScopeAll {
		return fmt.Errorf("validating capture scope %q: must be %q or %q", c.Scope, ScopePods, ScopeAll)
	}
	switch c.Object {
	case ObjectAuto, ObjectDefault, ObjectCompat, "":
	default:
		return fmt.Errorf("validating BPF object %q: must be %q, %q or %q", c.Object, ObjectAuto, ObjectDefault, ObjectCompat)
	}
	if c.ProcRoot == "" {
		return errors.New("validating proc root: must not be empty")
	}
	return nil
}

// validateKey applies KEP-4369's rule: any printable ASCII except '='.
func validateKey(k string) error {
	if k == "" || len(k) > maxKeyLen {
		return fmt.Errorf("validating key %q: length must be 1 to %d", k, maxKeyLen)
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 32 || k[i] > 126 || k[i] == '=' {
			return fmt.Errorf("validating key %q: byte %d is not printable ASCII or is '='", k, i)
		}
	}
	return nil
}

// Preflight says exactly what is missing for capture to run here.
func Preflight() error {
	var missing []error
	if os.Geteuid() != 0 {
		missing = append(missing, errors.New("capture needs root with CAP_BPF and CAP_PERFMON (to load tracing programs), plus CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH to read other users' processes at start; run it with sudo or as root"))
	}
	if _, err := os.Stat("/sys/kernel/btf/vmlinux"); err != nil {
		missing = append(missing, errors.New("this kernel exposes no BTF (/sys/kernel/btf/vmlinux is missing); capture needs a kernel built with CONFIG_DEBUG_INFO_BTF=y (5.8 or later)"))
	}
	return errors.Join(missing...)
}

// keyPattern packs the first bytes of "KEY=" into the prefix and mask the
// BPF scan compares with one 8-byte load.
func keyPattern(k string) (prefix, mask uint64) {
	pat := k + "="
	for i := 0; i < 8 && i < len(pat); i++ {
		prefix |= uint64(pat[i]) << (8 * i)
		mask |= 0xff << (8 * i)
	}
	return prefix, mask
}

func boolU32(b bool) uint32 {
	if b {
		return 1
	}
	return 0
}
