package capture

import (
	"encoding/binary"
	"slices"
	"testing"
	"time"
	"unsafe"

	"github.com/execid/correlator/pkg/vocab"
)

// Fixture values shared by the pure (no root, no BPF) tests of this package.
// Names carry an fx prefix: the package's kernel tests live beside them.
const (
	fxAuditKey = "KUBERNETES_EXEC_AUDIT_ID"
	fxSPOKey   = "SPO_EXEC_REQUEST_UID"
	fxAuditID  = "6f1f0a0e-3b7c-4d2a-9e61-0c8b5d4e2f10"
	fxClaimed  = "0bad0bad-0000-4000-8000-000000000000"
	fxSPOUID   = "c0ffee00-1111-4222-8333-444455556666"
	fxPodUID   = "7498102a-ed8b-4d32-9c9c-d9c98127d8b5"
	fxCtrID    = "6010f6fb2a062f522f18fb2108c3fe034a53cdd65c49523889d84b9f7960a83e"
)

var (
	fxKeys     = []string{fxAuditKey, fxSPOKey}
	fxBootTime = time.Date(2025, 3, 4, 5, 6, 7, 0, time.UTC)
)

// execFixture is an exec event in full form: the generated fixed part,
// and the tail's parts as arrays of the kernel's limits. encodeFrame packs
// it as the kernel does.
type execFixture struct {
	correlatorExecEvent
	Ids, Claimed [maxKeySlots]correlatorIdSlot
	Filename     [maxFilename]int8
	Argv         [maxArgvLen]int8
	Cgroup       [maxCgroupLen]int8
	CgroupParent [maxCgroupLen]int8
}

// exitFixture is an exit event in full form.
type exitFixture struct {
	correlatorExitEvent
	Ids          [maxKeySlots]correlatorIdSlot
	Cgroup       [maxCgroupLen]int8
	CgroupParent [maxCgroupLen]int8
}

// encodeFrame serialises a fixture the way the kernel writes it: the
// fixed part little-endian, fields in order, no padding, then the tail:
// each string's first *_len bytes, then every slot that is set, with its
// own length. The size and masks are computed; lengths are taken as given
// (a length past its array packs only the array, so the frame disagrees
// with itself, as a corrupt one would). It goes through encoding/binary
// rather than the decoder's unsafe view, so a layout disagreement between
// the two shows up as a test failure.
func encodeFrame(t testing.TB, raw any) []byte {
	t.Helper()
	var fixed any
	var tail []byte
	switch r := raw.(type) {
	case *execFixture:
		f := r.correlatorExecEvent
		tail = appendCString(tail, r.Filename[:], f.FilenameLen)
		tail = appendCString(tail, r.Argv[:], f.ArgvLen)
		tail = appendCString(tail, r.Cgroup[:], f.CgroupLen)
		tail = appendCString(tail, r.CgroupParent[:], f.CgroupParentLen)
		tail, f.IdsMask = appendSlots(tail, &r.Ids)
		tail, f.ClaimedMask = appendSlots(tail, &r.Claimed)
		f.Hdr.Size = uint32(execEventSize + len(tail))
		fixed = &f
	case *exitFixture:
		f := r.correlatorExitEvent
		tail = appendCString(tail, r.Cgroup[:], f.CgroupLen)
		tail = appendCString(tail, r.CgroupParent[:], f.CgroupParentLen)
		tail, f.IdsMask = appendSlots(tail, &r.Ids)
		f.Hdr.Size = uint32(exitEventSize + len(tail))
		fixed = &f
	default:
		t.Fatalf("encoding frame: unsupported %T", raw)
	}
	b, err := binary.Append(nil, binary.LittleEndian, fixed)
	if err != nil {
		t.Fatalf("encoding frame: %v", err)
	}
	return append(b, tail...)
}

func appendCString(dst []byte, s []int8, n uint16) []byte {
	n = min(n, uint16(len(s)))
	return append(dst, unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), len(s))[:n]...)
}

// appendSlots packs every slot that holds anything, as the kernel sends
// the slots it filled.
func appendSlots(dst []byte, slots *[maxKeySlots]correlatorIdSlot) ([]byte, uint8) {
	var mask uint8
	for k := range slots {
		s := &slots[k]
		if s.Source == 0 && s.Flags == 0 && s.Len == 0 {
			continue
		}
		mask |= 1 << k
		dst = binary.LittleEndian.AppendUint16(dst, s.Len)
		dst = append(dst, s.Source, uint8(k))
		dst = binary.LittleEndian.AppendUint32(dst, s.Flags)
		dst = append(dst, s.Value[:min(int(s.Len), len(s.Value))]...)
	}
	return dst, mask
}

func setCString(dst []int8, s string) uint16 {
	clear(dst)
	n := copy(unsafe.Slice((*byte)(unsafe.Pointer(&dst[0])), len(dst)), s)
	return uint16(n)
}

func setArgv(r *execFixture, block string) {
	r.ArgvLen = setCString(r.Argv[:], block)
}

func setSlot(s *correlatorIdSlot, value string, src correlatorIdSource, flags correlatorKeyFlag) {
	clear(s.Value[:])
	s.Len = uint16(copy(s.Value[:], value))
	s.Source = uint8(src)
	s.Flags = uint32(flags)
}

// fixtureExec is a realistic exec of `sh -c 'echo hi'` in a burstable pod
// on the cgroupfs driver, a session root that found the audit ID in its
// own environment.
func fixtureExec() execFixture {
	var r execFixture
	r.Hdr.Kind = uint32(correlatorEventKindEVENT_KIND_EXEC)
	r.Hdr.TimeNs = 5_000_000_123
	r.StartNs = 123_456_789_012       // 12345 ticks
	r.ParentStartNs = 100_009_999_999 // 10000 ticks: floor, not rounding
	r.RootStartNs = 123_456_789_012
	r.CgroupId = 7777
	r.Pid = 4243 // the exec'ing thread; the event names the group
	r.Tgid = 4242
	r.Ppid = 4100
	r.Uid = 1000
	r.RootTgid = 4242
	r.Depth = 0
	r.Pidns = 4026532000
	r.Userns = 4026531837
	r.Origin = uint32(correlatorExecOriginEXEC_ORIGIN_OTHER_CGROUP)
	r.ExecBy = correlatorImagePlace{CgroupId: 42, Pidns: 4026531836, Userns: 4026531837}
	r.EnvBytes = 2048
	r.EnvScanned = 12
	r.FilenameLen = setCString(r.Filename[:], "/usr/bin/sh")
	setArgv(&r, "sh\x00-c\x00echo hi\x00")
	r.CgroupLen = setCString(r.Cgroup[:], fxCtrID)
	r.CgroupParentLen = setCString(r.CgroupParent[:], "pod"+fxPodUID)
	setSlot(&r.Ids[0], fxAuditID, correlatorIdSourceID_SOURCE_ENV, 0)
	return r
}

// fixtureExecEvent is what fixtureExec must decode to.
func fixtureExecEvent() Event {
	return Event{Exec: Exec{ProcessID: "4242-12345",
		ParentProcessID: "4100-10000",
		PID:             4242,
		PPID:            4100,
		UID:             1000,
		Filename:        "/usr/bin/sh",
		Argv:            []string{"sh", "-c", "echo hi"},
		ContainerID:     fxCtrID,
		PodUID:          fxPodUID,

		SessionRootID: "4242-12345"}, Time: fxBootTime.Add(5_000_000_123),
		Kind: KindExec,

		Cgroup:       "pod" + fxPodUID + "/" + fxCtrID,
		CgroupID:     7777,
		PIDNamespace: 4026532000,
		ExecOrigin:   OriginOtherCgroup,
		AuditID:      fxAuditID,
		Source:       vocab.SourceEnv,
		Flags:        []string{},

		EnvBytes:      2048,
		StartBootNs:   123_456_789_012,
		ParentStartNs: 100_009_999_999,
	}
}

// normalize sorts flag lists: their order is not part of the contract.
func normalize(ev Event) Event {
	ev.Flags = slices.Sorted(slices.Values(ev.Flags))
	if ev.Flags == nil {
		ev.Flags = []string{}
	}
	for k, kv := range ev.Keys {
		if kv.Flags != nil {
			kv.Flags = slices.Sorted(slices.Values(kv.Flags))
		}
		ev.Keys[k] = kv
	}
	return ev
}

func decodeOK(t testing.TB, d *Decoder, frame []byte) Event {
	t.Helper()
	ev, err := d.Decode(frame)
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	return ev
}
