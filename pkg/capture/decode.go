package capture

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"time"
	"unsafe"

	"github.com/execid/correlator/pkg/vocab"
)

// Sentinel errors for frames that cannot be decoded.
var (
	ErrShortFrame   = errors.New("frame shorter than its header")
	ErrUnknownKind  = errors.New("unknown event kind")
	ErrSizeMismatch = errors.New("frame size does not match its kind")
)

const (
	headerSize    = int(unsafe.Sizeof(correlatorEventHeader{}))
	execEventSize = int(unsafe.Sizeof(correlatorExecEvent{}))
	exitEventSize = int(unsafe.Sizeof(correlatorExitEvent{}))
)

type correlatorEventHeader = struct {
	Kind   uint32
	Size   uint32
	TimeNs uint64
}

// Decoder turns ring-buffer frames into Events. It is pure: no I/O.
type Decoder struct {
	keys     []string
	bootTime time.Time
}

// NewDecoder returns a Decoder for the configured keys (keys[0] is the
// audit ID key) and the wall-clock time of boot, which converts the
// kernel's boot-time stamps.
func NewDecoder(keys []string, bootTime time.Time) *Decoder {
	return &Decoder{keys: keys, bootTime: bootTime}
}

// Decode decodes one frame. The frame is not retained.
func (d *Decoder) Decode(b []byte) (Event, error) {
	if len(b) < headerSize {
		return Event{}, ErrShortFrame
	}
	kind := binary.LittleEndian.Uint32(b[0:4])
	size := binary.LittleEndian.Uint32(b[4:8])
	switch kind {
	case uint32(correlatorEventKindEVENT_KIND_EXEC):
		if size != uint32(execEventSize) || len(b) < execEventSize {
			return Event{}, fmt.Errorf("decoding exec event of %d bytes: %w", len(b), ErrSizeMismatch)
		}
		var raw correlatorExecEvent
		copy(unsafe.Slice((*byte)(unsafe.Pointer(&raw)), execEventSize), b)
		return d.exec(&raw), nil
	case uint32(correlatorEventKindEVENT_KIND_EXIT):
		if size != uint32(exitEventSize) || len(b) < exitEventSize {
			return Event{}, fmt.Errorf("decoding exit event of %d bytes: %w", len(b), ErrSizeMismatch)
		}
		var raw correlatorExitEvent
		copy(unsafe.Slice((*byte)(unsafe.Pointer(&raw)), exitEventSize), b)
		return d.exit(&raw), nil
	default:
		return Event{}, fmt.Errorf("decoding event kind %d: %w", kind, ErrUnknownKind)
	}
}

func (d *Decoder) exec(r *correlatorExecEvent) Event {
	ev := Event{
		Time: d.bootTime.Add(time.Duration(r.Hdr.TimeNs)),
		Kind: KindExec,
		Exec: Exec{
			ProcessID:       ProcessKey(r.Tgid, r.StartNs),
			ParentProcessID: ProcessKey(r.Ppid, r.ParentStartNs),
			PID:             r.Tgid,
			PPID:            r.Ppid,
			UID:             r.Uid,
			Filename:        cString(r.Filename[:], int(r.FilenameLen)),
			Argv:            splitArgv(r.Argv[:], int(r.ArgvLen), r.Flags&uint32(correlatorEventFlagEVENT_FLAG_ARGV_TRUNCATED) != 0),
			ArgvTruncated:   r.Flags&uint32(correlatorEventFlagEVENT_FLAG_ARGV_TRUNCATED) != 0,
		},
		CgroupID:      r.CgroupId,
		PIDNamespace:  r.Pidns,
		ExecOrigin:    originName(r.Origin),
		Depth:         r.Depth,
		EnvBytes:      r.EnvBytes,
		StartBootNs:   r.StartNs,
		ParentStartNs: r.ParentStartNs,
	}
	ev.Cgroup = joinCgroup(cString(r.CgroupParent[:], int(r.CgroupParentLen)), cString(r.Cgroup[:], int(r.CgroupLen)))
	ev.ContainerID, ev.PodUID = ParseCgroupPath(ev.Cgroup)
	if r.RootTgid != 0 {
		ev.SessionRootID = ProcessKey(r.RootTgid, r.RootStartNs)
	}
	d.applyKeys(&ev, r.Ids[:], r.Claimed[:])
	ev.Flags = append(ev.Flags, eventFlags(r.Flags)...)
	if ev.Flags == nil {
		ev.Flags = []string{}
	}
	return ev
}

func (d *Decoder) exit(r *correlatorExitEvent) Event {
	ev := Event{
		Time:        d.bootTime.Add(time.Duration(r.Hdr.TimeNs)),
		Kind:        KindExit,
		Exec:        Exec{ProcessID: ProcessKey(r.Tgid, r.StartNs), PID: r.Tgid, PPID: r.Ppid, UID: r.Uid},
		CgroupID:    r.CgroupId,
		StartBootNs: r.StartNs,
	}
	ev.Cgroup = joinCgroup(cString(r.CgroupParent[:], int(r.CgroupParentLen)), cString(r.Cgroup[:], int(r.CgroupLen)))
	ev.ContainerID, ev.PodUID = ParseCgroupPath(ev.Cgroup)
	status := int(r.ExitCode)
	code := (status >> 8) & 0xff
	if sig := status & 0x7f; sig != 0 {
		ev.Signal = sig
		code = 128 + sig
	}
	ev.ExitCode = &code
	d.applyKeys(&ev, r.Ids[:], nil)
	if ev.Flags == nil {
		ev.Flags = []string{}
	}
	return ev
}

// applyKeys fills the audit ID fields from slot 0 and Keys from the rest.
func (d *Decoder) applyKeys(ev *Event, ids, claimed []correlatorIdSlot) {
	for k, name := range d.keys {
		if k >= len(ids) {
			break
		}
		kv := slotValue(&ids[k], claimedSlot(claimed, k))
		if k == 0 {
			ev.AuditID, ev.ClaimedAuditID, ev.Source = kv.Value, kv.Claimed, kv.Source
			ev.Flags = append(ev.Flags, kv.Flags...)
			continue
		}
		if kv.Value == "" && kv.Claimed == "" && len(kv.Flags) == 0 {
			continue
		}
		if ev.Keys == nil {
			ev.Keys = make(map[string]KeyValue, len(d.keys)-1)
		}
		ev.Keys[name] = kv
	}
}

func claimedSlot(claimed []correlatorIdSlot, k int) *correlatorIdSlot {
	if k < len(claimed) {
		return &claimed[k]
	}
	return nil
}

func slotValue(id, claimed *correlatorIdSlot) KeyValue {
	var kv KeyValue
	present := id.Source != uint8(correlatorIdSourceID_SOURCE_NONE)
	if present {
		kv.Value = string(id.Value[:min(int(id.Len), len(id.Value))])
		kv.Source = sourceName(id.Source)
	}
	f := id.Flags
	if claimed != nil && claimed.Source != uint8(correlatorIdSourceID_SOURCE_NONE) {
		kv.Claimed = string(claimed.Value[:min(int(claimed.Len), len(claimed.Value))])
		f |= claimed.Flags & uint32(correlatorKeyFlagKEY_FLAG_ID_TRUNCATED)
	}
	kv.Flags = keyFlags(f)
	if present {
		// Classify the authoritative value by its own flags, not the claim's.
		kv.Flags = append(kv.Flags, valueFlags(kv.Value, id.Flags)...)
	}
	return kv
}

// valueFlags classifies an ID: the KEP's placeholder, or not a UUID.
func valueFlags(v string, f uint32) []string {
	switch {
	case v == "unknown":
		return []string{vocab.FlagPlaceholder}
	case !isUUID(v) || f&uint32(correlatorKeyFlagKEY_FLAG_ID_TRUNCATED) != 0:
		return []string{vocab.FlagNonstandardID}
	}
	return nil
}

func sourceName(s uint8) vocab.Source {
	switch s {
	case uint8(correlatorIdSourceID_SOURCE_ENV):
		return vocab.SourceEnv
	case uint8(correlatorIdSourceID_SOURCE_INHERITED):
		return vocab.SourceInherited
	case uint8(correlatorIdSourceID_SOURCE_PROCFS):
		return vocab.SourceProcfs
	}
	return vocab.SourceNone
}

// flagName maps one kernel flag bit to its name.
type flagName struct {
	bit  uint32
	name string
}

var keyFlagNames = []flagName{
	{uint32(correlatorKeyFlagKEY_FLAG_ENV_MISMATCH), vocab.FlagEnvMismatch},
	{uint32(correlatorKeyFlagKEY_FLAG_ENV_REMOVED), vocab.FlagEnvRemoved},
	{uint32(correlatorKeyFlagKEY_FLAG_ROOT_UNVERIFIED), vocab.FlagRootUnverified},
	{uint32(correlatorKeyFlagKEY_FLAG_DUPLICATE_KEY), vocab.FlagDuplicateKey},
	{uint32(correlatorKeyFlagKEY_FLAG_ID_TRUNCATED), vocab.FlagIDTruncated},
	{uint32(correlatorKeyFlagKEY_FLAG_ROOT_INDIRECT), vocab.FlagRootIndirect},
}

var originNames = map[uint32]Origin{
	uint32(correlatorExecOriginEXEC_ORIGIN_UNKNOWN):        OriginUnknown,
	uint32(correlatorExecOriginEXEC_ORIGIN_OTHER_CGROUP):   OriginOtherCgroup,
	uint32(correlatorExecOriginEXEC_ORIGIN_OUTER_PIDNS):    OriginOuterPIDNS,
	uint32(correlatorExecOriginEXEC_ORIGIN_INSIDE):         OriginInside,
	uint32(correlatorExecOriginEXEC_ORIGIN_RUNTIME_CHILD):  OriginRuntimeChild,
	uint32(correlatorExecOriginEXEC_ORIGIN_PARENT_INSIDE):  OriginParentInside,
	uint32(correlatorExecOriginEXEC_ORIGIN_NESTED_USERNS):  OriginNestedUserns,
	uint32(correlatorExecOriginEXEC_ORIGIN_CONTAINER_INIT): OriginContainerInit,
}

// originName names the kernel's verdict; a value this build does not know
// reads as unknown, never as verified.
func originName(o uint32) Origin {
	if n, ok := originNames[o]; ok {
		return n
	}
	return OriginUnknown
}

var eventFlagNames = []flagName{
	{uint32(correlatorEventFlagEVENT_FLAG_SCAN_TRUNCATED), vocab.FlagScanTruncated},
	{uint32(correlatorEventFlagEVENT_FLAG_ARGV_TRUNCATED), vocab.FlagArgvTruncated},
	{uint32(correlatorEventFlagEVENT_FLAG_SCAN_ERROR), vocab.FlagScanError},
	{uint32(correlatorEventFlagEVENT_FLAG_STALE_LINEAGE), vocab.FlagStaleLineage},
	{uint32(correlatorEventFlagEVENT_FLAG_LINEAGE_FULL), vocab.FlagLineageFull},
}

func keyFlags(f uint32) []string   { return flagNames(f, keyFlagNames) }
func eventFlags(f uint32) []string { return flagNames(f, eventFlagNames) }

func flagNames(f uint32, table []flagName) []string {
	var out []string
	for _, fn := range table {
		if f&fn.bit != 0 {
			out = append(out, fn.name)
		}
	}
	return out
}

// joinCgroup renders the two innermost cgroup names as a path.
func joinCgroup(parent, leaf string) string {
	if parent == "" || parent == "/" {
		return leaf
	}
	return parent + "/" + leaf
}

func cString(b []int8, n int) string {
	if n <= 0 {
		return ""
	}
	n = min(n, len(b))
	s := unsafe.Slice((*byte)(unsafe.Pointer(&b[0])), n)
	if i := bytes.IndexByte(s, 0); i >= 0 {
		s = s[:i]
	}
	return string(s)
}

// splitArgv splits the NUL-separated argv block. Every argument ends in
// one NUL, so exactly one is dropped (empty arguments are kept); a block cut
// off by the kernel's bound ends mid-argument and keeps that partial one.
func splitArgv(b []int8, n int, truncated bool) []string {
	if n <= 0 {
		return nil
	}
	n = min(n, len(b))
	s := unsafe.Slice((*byte)(unsafe.Pointer(&b[0])), n)
	if !truncated && s[len(s)-1] == 0 {
		s = s[:len(s)-1]
	}
	parts := bytes.Split(s, []byte{0})
	out := make([]string, len(parts))
	for i, p := range parts {
		out[i] = string(p)
	}
	return out
}
