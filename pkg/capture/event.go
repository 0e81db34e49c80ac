package capture

import (
	"strconv"
	"time"

	"github.com/execid/correlator/pkg/vocab"
)

// Kind names what an Event records.
type Kind string

const (
	KindExec Kind = "exec"
	KindExit Kind = "exit"
)

// Origin says who exec'd an image: where the image that called execve was
// itself loaded, against the container the new image runs in.
type Origin string

const (
	OriginUnknown       Origin = "unknown"        // the exec'ing image predates the probe
	OriginOtherCgroup   Origin = "other_cgroup"   // loaded in another cgroup: the runtime's helper
	OriginOuterPIDNS    Origin = "outer_pidns"    // same cgroup, outer pid namespace (runc's CLONE_INTO_CGROUP)
	OriginInside        Origin = "inside"         // loaded inside this container: its own code
	OriginRuntimeChild  Origin = "runtime_child"  // the first image the runtime exec'd here (SPO's env prefix)
	OriginParentInside  Origin = "parent_inside"  // loaded outside, but the parent runs in this container
	OriginNestedUserns  Origin = "nested_userns"  // a pid namespace the container made under its own user namespace
	OriginContainerInit Origin = "container_init" // the runtime started a container's pid 1: an entrypoint, not an exec
)

// Verified reports whether an exec of this origin came from outside the
// container: only such an exec may start a verified session.
func (o Origin) Verified() bool { return o == OriginOtherCgroup || o == OriginOuterPIDNS }

// KeyValue is what the kernel recorded for one configured key.
type KeyValue struct {
	Value   string       `json:"value,omitempty"`
	Claimed string       `json:"claimed,omitempty"`
	Source  vocab.Source `json:"source,omitempty"`
	Flags   []string     `json:"flags,omitempty"`
}

// Exec is the process image the kernel reported: who it is, what it runs
// and where. The joiner's process record embeds it as it is.
type Exec struct {
	ProcessID       string   `json:"processID"`
	ParentProcessID string   `json:"parentProcessID,omitempty"`
	PID             uint32   `json:"pid"`
	PPID            uint32   `json:"ppid"`
	UID             uint32   `json:"uid"`
	Filename        string   `json:"filename,omitempty"`
	Argv            []string `json:"argv,omitempty"`
	ArgvTruncated   bool     `json:"argvTruncated,omitempty"`
	ContainerID     string   `json:"containerID,omitempty"`
	PodUID          string   `json:"podUID,omitempty"`
	// SessionRootID is the process that started the lineage its ID came
	// down: the session root, as the kernel followed it.
	SessionRootID string `json:"sessionRootID,omitempty"`
}

// Event is one process exec or exit, as `correlator capture` prints it.
type Event struct {
	Time time.Time `json:"time"`
	Kind Kind      `json:"kind"`
	Exec
	Cgroup       string `json:"cgroup,omitempty"`
	CgroupID     uint64 `json:"cgroupID,omitempty"`
	PIDNamespace uint32 `json:"pidNamespace,omitempty"`
	// ExecOrigin is who exec'd this image (exec events only).
	ExecOrigin     Origin       `json:"execOrigin,omitempty"`
	AuditID        string       `json:"auditID"`
	ClaimedAuditID string       `json:"claimedAuditID,omitempty"`
	Source         vocab.Source `json:"source,omitempty"`
	Flags          []string     `json:"flags"`
	// Keys holds every configured key other than the audit ID key.
	Keys          map[string]KeyValue `json:"keys,omitempty"`
	Depth         uint32              `json:"depth,omitempty"`
	EnvBytes      uint32              `json:"envBytes,omitempty"`
	ExitCode      *int                `json:"exitCode,omitempty"`
	Signal        int                 `json:"signal,omitempty"`
	StartBootNs   uint64              `json:"-"`
	ParentStartNs uint64              `json:"-"`
}

// ticksNs is the resolution /proc reports start times in (USER_HZ=100).
const ticksNs = 10_000_000

// ProcessKey renders the stable process key from tgid and start time.
// Start time is kept at /proc's 10 ms resolution so that a process seen by
// the kernel and one bootstrapped from /proc get the same key.
func ProcessKey(tgid uint32, startBootNs uint64) string {
	if tgid == 0 {
		return ""
	}
	// One allocation, not three: every event renders one to three keys.
	var buf [41]byte
	b := strconv.AppendUint(buf[:0], uint64(tgid), 10)
	b = append(b, '-')
	return string(strconv.AppendUint(b, startBootNs/ticksNs, 10))
}

// HasFlag reports whether the event carries flag f.
func (e *Event) HasFlag(f string) bool {
	for _, x := range e.Flags {
		if x == f {
			return true
		}
	}
	return false
}
