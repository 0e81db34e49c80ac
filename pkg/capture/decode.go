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
	ErrSizeMismatch = errors.New("frame size does not match its content")
)

const (
	headerSize    = int(unsafe.Sizeof(correlatorEventHeader{}))
	execEventSize = int(unsafe.Sizeof(correlatorExecEvent{})) // the fixed part
	exitEventSize = int(unsafe.Sizeof(correlatorExitEvent{}))
	idWireSize    = int(unsafe.Sizeof(correlatorIdWire{}))

	maxKeySlots  = int(correlatorEventLimitEVENT_LIMIT_KEYS)
	maxIDLen     = int(correlatorEventLimitEVENT_LIMIT_ID)
	maxArgvLen   = int(correlatorEventLimitEVENT_LIMIT_ARGV)
	maxFilename  = int(correlatorEventLimitEVENT_LIMIT_FILENAME)
	maxCgroupLen = int(correlatorEventLimitEVENT_LIMIT_CGROUP)
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
	// What events repeat, rendered once (intern.go); the probe's single
	// reader owns them, so a Decoder is not safe for concurrent use.
	strs         interner
	cgroups      cgroups
	parent, root keyCache
}

// NewDecoder returns a Decoder for the configured keys (keys[0] is the
// audit ID key) and the wall-clock time of boot, which converts the
// kernel's boot-time stamps.
func NewDecoder(keys []string, bootTime time.Time) *Decoder {
	return &Decoder{keys: keys, bootTime: bootTime}
}

// slot is one key's value as a frame's tail carries it.
type slot struct {
	present bool // the kernel sent it
	value   []byte
	source  uint8
	flags   uint32
}

// tail walks the variable part of a frame. Every take is checked against
// what is left, so a length that overruns the frame is an error, never a
// read past it.
type tail struct {
	b   []byte
	bad bool
}

func (t *tail) take(n, max int) []byte {
	if n > max || n > len(t.b) {
		t.bad = true
		return nil
	}
	out := t.b[:n]
	t.b = t.b[n:]
	return out
}

// slots reads one id_wire and value per bit of mask, keys ascending.
func (t *tail) slots(mask uint8, out *[maxKeySlots]slot) {
	if int(mask)>>maxKeySlots != 0 {
		t.bad = true
		return
	}
	for k := 0; k < maxKeySlots && !t.bad; k++ {
		if mask&(1<<k) == 0 {
			continue
		}
		h := t.take(idWireSize, idWireSize)
		if t.bad {
			return
		}
		n := int(binary.LittleEndian.Uint16(h[0:2]))
		if int(h[3]) != k {
			t.bad = true
			return
		}
		out[k] = slot{present: true, source: h[2], flags: binary.LittleEndian.Uint32(h[4:8]), value: t.take(n, maxIDLen)}
	}
}

// Decode decodes one frame: the fixed part its kind names, then a tail
// that must account for exactly the size the header gives. The frame is
// not retained.
func (d *Decoder) Decode(b []byte) (Event, error) {
	if len(b) < headerSize {
		return Event{}, ErrShortFrame
	}
	kind := binary.LittleEndian.Uint32(b[0:4])
	size := binary.LittleEndian.Uint32(b[4:8])
	switch kind {
	case uint32(correlatorEventKindEVENT_KIND_EXEC):
		if size < uint32(execEventSize) || uint64(size) > uint64(len(b)) {
			return Event{}, fmt.Errorf("decoding exec event of %d bytes, header says %d: %w", len(b), size, ErrSizeMismatch)
		}
		var raw correlatorExecEvent
		copy(unsafe.Slice((*byte)(unsafe.Pointer(&raw)), execEventSize), b)
		ev, ok := d.exec(&raw, &tail{b: b[execEventSize:size]})
		if !ok {
			return Event{}, fmt.Errorf("decoding exec event of %d bytes: tail disagrees with its lengths: %w", size, ErrSizeMismatch)
		}
		return ev, nil
	case uint32(correlatorEventKindEVENT_KIND_EXIT):
		if size < uint32(exitEventSize) || uint64(size) > uint64(len(b)) {
			return Event{}, fmt.Errorf("decoding exit event of %d bytes, header says %d: %w", len(b), size, ErrSizeMismatch)
		}
		var raw correlatorExitEvent
		copy(unsafe.Slice((*byte)(unsafe.Pointer(&raw)), exitEventSize), b)
		ev, ok := d.exit(&raw, &tail{b: b[exitEventSize:size]})
		if !ok {
			return Event{}, fmt.Errorf("decoding exit event of %d bytes: tail disagrees with its lengths: %w", size, ErrSizeMismatch)
		}
		return ev, nil
	default:
		return Event{}, fmt.Errorf("decoding event kind %d: %w", kind, ErrUnknownKind)
	}
}

func (d *Decoder) exec(r *correlatorExecEvent, t *tail) (Event, bool) {
	truncated := r.Flags&uint32(correlatorEventFlagEVENT_FLAG_ARGV_TRUNCATED) != 0
	filename := t.take(int(r.FilenameLen), maxFilename)
	argv := t.take(int(r.ArgvLen), maxArgvLen)
	cg := t.take(int(r.CgroupLen), maxCgroupLen)
	cgParent := t.take(int(r.CgroupParentLen), maxCgroupLen)
	var ids, claimed [maxKeySlots]slot
	t.slots(r.IdsMask, &ids)
	t.slots(r.ClaimedMask, &claimed)
	if t.bad || len(t.b) != 0 {
		return Event{}, false
	}
	ev := Event{
		Time: d.bootTime.Add(time.Duration(r.Hdr.TimeNs)),
		Kind: KindExec,
		Exec: Exec{
			ProcessID:       ProcessKey(r.Tgid, r.StartNs),
			ParentProcessID: d.parent.get(r.Ppid, r.ParentStartNs),
			PID:             r.Tgid,
			PPID:            r.Ppid,
			UID:             r.Uid,
			Filename:        d.strs.get(cBytes(filename)),
			Argv:            splitArgv(argv, truncated),
			ArgvTruncated:   truncated,
		},
		CgroupID:      r.CgroupId,
		PIDNamespace:  r.Pidns,
		ExecOrigin:    originName(r.Origin),
		Depth:         r.Depth,
		EnvBytes:      r.EnvBytes,
		StartBootNs:   r.StartNs,
		ParentStartNs: r.ParentStartNs,
	}
	cgi := d.cgroups.get(cgParent, cg)
	ev.Cgroup, ev.ContainerID, ev.PodUID = cgi.path, cgi.containerID, cgi.podUID
	if r.RootTgid != 0 {
		ev.SessionRootID = d.root.get(r.RootTgid, r.RootStartNs)
	}
	d.applyKeys(&ev, &ids, &claimed)
	ev.Flags = append(ev.Flags, eventFlags(r.Flags)...)
	if ev.Flags == nil {
		ev.Flags = []string{}
	}
	return ev, true
}

func (d *Decoder) exit(r *correlatorExitEvent, t *tail) (Event, bool) {
	cg := t.take(int(r.CgroupLen), maxCgroupLen)
	cgParent := t.take(int(r.CgroupParentLen), maxCgroupLen)
	var ids [maxKeySlots]slot
	t.slots(r.IdsMask, &ids)
	if t.bad || len(t.b) != 0 {
		return Event{}, false
	}
	ev := Event{
		Time:        d.bootTime.Add(time.Duration(r.Hdr.TimeNs)),
		Kind:        KindExit,
		Exec:        Exec{ProcessID: ProcessKey(r.Tgid, r.StartNs), PID: r.Tgid, PPID: r.Ppid, UID: r.Uid},
		CgroupID:    r.CgroupId,
		StartBootNs: r.StartNs,
	}
	cgi := d.cgroups.get(cgParent, cg)
	ev.Cgroup, ev.ContainerID, ev.PodUID = cgi.path, cgi.containerID, cgi.podUID
	status := int(r.ExitCode)
	code := (status >> 8) & 0xff
	if sig := status & 0x7f; sig != 0 {
		ev.Signal = sig
		code = 128 + sig
	}
	ev.ExitCode = &code
	d.applyKeys(&ev, &ids, nil)
	if ev.Flags == nil {
		ev.Flags = []string{}
	}
	return ev, true
}

// applyKeys fills the audit ID fields from slot 0 and Keys from the rest.
func (d *Decoder) applyKeys(ev *Event, ids, claimed *[maxKeySlots]slot) {
	for k, name := range d.keys {
		if k >= len(ids) {
			break
		}
		var cl *slot
		if claimed != nil {
			cl = &claimed[k]
		}
		kv := d.slotValue(&ids[k], cl)
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

func (d *Decoder) slotValue(id, claimed *slot) KeyValue {
	var kv KeyValue
	present := id.present && id.source != uint8(correlatorIdSourceID_SOURCE_NONE)
	if present {
		kv.Value = d.strs.get(id.value)
		kv.Source = sourceName(id.source)
	}
	f := id.flags
	if claimed != nil && claimed.present && claimed.source != uint8(correlatorIdSourceID_SOURCE_NONE) {
		kv.Claimed = d.strs.get(claimed.value)
		f |= claimed.flags & uint32(correlatorKeyFlagKEY_FLAG_ID_TRUNCATED)
	}
	kv.Flags = keyFlags(f)
	if present {
		// Classify the authoritative value by its own flags, not the claim's.
		kv.Flags = append(kv.Flags, valueFlags(kv.Value, id.flags)...)
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
	{uint32(correlatorKeyFlagKEY_FLAG_FROM_ARGV), vocab.FlagBridgeArgv},
	{uint32(correlatorKeyFlagKEY_FLAG_PROCFS_ROOT), vocab.FlagProcfsRoot},
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

// cBytes is a kernel string up to its first NUL.
func cBytes(s []byte) []byte {
	if i := bytes.IndexByte(s, 0); i >= 0 {
		return s[:i]
	}
	return s
}

// splitArgv splits the NUL-separated argv block. Every argument ends in
// one NUL, so exactly one is dropped (empty arguments are kept); a block cut
// off by the kernel's bound ends mid-argument and keeps that partial one.
func splitArgv(s []byte, truncated bool) []string {
	if len(s) == 0 {
		return nil
	}
	if !truncated && s[len(s)-1] == 0 {
		s = s[:len(s)-1]
	}
	out := make([]string, 0, bytes.Count(s, []byte{0})+1)
	for {
		i := bytes.IndexByte(s, 0)
		if i < 0 {
			return append(out, string(s))
		}
		out = append(out, string(s[:i]))
		s = s[i+1:]
	}
}
