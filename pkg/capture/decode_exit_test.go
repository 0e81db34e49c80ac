package capture

import (
	"encoding/binary"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/execid/correlator/pkg/vocab"
)

func fixtureExit() exitFixture {
	var r exitFixture
	r.Hdr.Kind = uint32(correlatorEventKindEVENT_KIND_EXIT)
	r.Hdr.TimeNs = 7_000_000_000
	r.StartNs = 123_456_789_012
	r.Pid, r.Tgid, r.Ppid = 4242, 4242, 4100
	setSlot(&r.Ids[0], fxAuditID, correlatorIdSourceID_SOURCE_INHERITED, 0)
	return r
}

func TestDecodeExit(t *testing.T) {
	tests := []struct {
		name     string
		status   uint32
		mod      func(r *exitFixture)
		wantCode int
		wantSig  int
		want     func(e *Event)
	}{
		{name: "exit 0", status: 0, wantCode: 0},
		{name: "exit 1", status: 1 << 8, wantCode: 1},
		{name: "exit 255", status: 255 << 8, wantCode: 255},
		{name: "exit code above a byte is masked", status: 0x1ff << 8, wantCode: 255},
		{name: "SIGKILL", status: 9, wantCode: 137, wantSig: 9},
		{name: "SIGTERM", status: 15, wantCode: 143, wantSig: 15},
		{name: "SIGSEGV with core dump", status: 0x80 | 11, wantCode: 139, wantSig: 11},
		{name: "SIGRTMAX", status: 64, wantCode: 192, wantSig: 64},
		{
			name: "no lineage: no id", mod: func(r *exitFixture) { r.Ids[0] = correlatorIdSlot{} },
			want: func(e *Event) { e.AuditID, e.Source = "", vocab.SourceNone },
		},
		{
			name: "flags and second key",
			mod: func(r *exitFixture) {
				setSlot(&r.Ids[0], "unknown", correlatorIdSourceID_SOURCE_PROCFS, correlatorKeyFlagKEY_FLAG_ROOT_UNVERIFIED)
				setSlot(&r.Ids[1], fxSPOUID, correlatorIdSourceID_SOURCE_INHERITED, 0)
			},
			want: func(e *Event) {
				e.AuditID, e.Source = "unknown", vocab.SourceProcfs
				e.Flags = []string{vocab.FlagRootUnverified, vocab.FlagPlaceholder}
				e.Keys = map[string]KeyValue{fxSPOKey: {Value: fxSPOUID, Source: vocab.SourceInherited}}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			raw := fixtureExit()
			raw.ExitCode = tc.status
			if tc.mod != nil {
				tc.mod(&raw)
			}
			code := tc.wantCode
			want := Event{Exec: Exec{ProcessID: "4242-12345",
				PID:  4242,
				PPID: 4100}, Time: fxBootTime.Add(7 * time.Second),
				Kind: KindExit,

				AuditID:     fxAuditID,
				Source:      vocab.SourceInherited,
				Flags:       []string{},
				ExitCode:    &code,
				Signal:      tc.wantSig,
				StartBootNs: 123_456_789_012,
			}
			if tc.want != nil {
				tc.want(&want)
			}
			got := decodeOK(t, NewDecoder(fxKeys, fxBootTime), encodeFrame(t, &raw))
			if got.ExitCode == nil {
				t.Fatalf("ExitCode is nil; an exit event always has one")
			}
			if got.Flags == nil {
				t.Errorf("Flags is nil; want an empty list so JSON shows []")
			}
			if got, want := normalize(got), normalize(want); !reflect.DeepEqual(got, want) {
				t.Errorf("Decode mismatch (exitCode %d, want %d)\n got: %+v\nwant: %+v", *got.ExitCode, *want.ExitCode, got, want)
			}
		})
	}
}

// Offsets in the fixed exec part: filename_len, and ids_mask.
var (
	lenOffset  = int(unsafe.Offsetof(correlatorExecEvent{}.FilenameLen))
	maskOffset = int(unsafe.Offsetof(correlatorExecEvent{}.IdsMask))
)

// tailStrings is the length of a fixture's strings, where its slots start.
func tailStrings(r execFixture) int {
	return int(r.FilenameLen) + int(r.ArgvLen) + int(r.CgroupLen) + int(r.CgroupParentLen)
}

func patch(frame []byte, off int, v byte) []byte {
	b := slices.Clone(frame)
	b[off] = v
	return b
}

func patch16(frame []byte, off int, v uint16) []byte {
	b := slices.Clone(frame)
	binary.LittleEndian.PutUint16(b[off:], v)
	return b
}

func TestDecodeErrors(t *testing.T) {
	exec, exit := fixtureExec(), fixtureExit()
	execFrame, exitFrame := encodeFrame(t, &exec), encodeFrame(t, &exit)
	header := func(kind, size uint32, n int) []byte {
		b := make([]byte, n)
		binary.LittleEndian.PutUint32(b[0:], kind)
		binary.LittleEndian.PutUint32(b[4:], size)
		return b
	}
	withSize := func(frame []byte, size uint32) []byte {
		b := slices.Clone(frame)
		binary.LittleEndian.PutUint32(b[4:], size)
		return b
	}
	withKind := func(frame []byte, kind uint32) []byte {
		b := slices.Clone(frame)
		binary.LittleEndian.PutUint32(b[0:], kind)
		return b
	}
	const execKind, exitKind = 1, 2
	tests := []struct {
		name  string
		frame []byte
		want  error
	}{
		{"nil", nil, ErrShortFrame},
		{"empty", []byte{}, ErrShortFrame},
		{"one byte", []byte{1}, ErrShortFrame},
		{"header minus one", execFrame[:15], ErrShortFrame},
		{"kind zero", header(0, 16, 16), ErrUnknownKind},
		{"kind three", withKind(execFrame, 3), ErrUnknownKind},
		{"kind max", withKind(exitFrame, 0xffffffff), ErrUnknownKind},
		{"kind big-endian exec", withKind(execFrame, 1<<24), ErrUnknownKind},
		{"exec header only", header(execKind, uint32(execEventSize), 16), ErrSizeMismatch},
		{"exec frame cut short", execFrame[:len(execFrame)-1], ErrSizeMismatch},
		{"exec size zero", withSize(execFrame, 0), ErrSizeMismatch},
		{"exec size one less", withSize(execFrame, uint32(execEventSize-1)), ErrSizeMismatch},
		{"exec size one more", withSize(execFrame, uint32(execEventSize+1)), ErrSizeMismatch},
		{"exec size huge", withSize(execFrame, 0xffffffff), ErrSizeMismatch},
		{"exec with exit size", withKind(exitFrame, execKind), ErrSizeMismatch},
		{"exit header only", header(exitKind, uint32(exitEventSize), 16), ErrSizeMismatch},
		{"exit frame cut short", exitFrame[:exitEventSize-8], ErrSizeMismatch},
		{"exit size one less", withSize(exitFrame, uint32(exitEventSize-1)), ErrSizeMismatch},
		{"exit with exec size", withKind(execFrame, exitKind), ErrSizeMismatch},
		{"exec size past the frame by one", execFrame[:len(execFrame)-1], ErrSizeMismatch},
		{"exec size below the fixed part", withSize(execFrame[:execEventSize-8], uint32(execEventSize-8)), ErrSizeMismatch},
		{"exec tail byte to spare", withSize(append(slices.Clone(execFrame), 0), uint32(len(execFrame)+1)), ErrSizeMismatch},
		{"exec slot length past the tail", patch(execFrame, execEventSize+tailStrings(exec), 0xff), ErrSizeMismatch},
		{"exec slot of another key", patch(execFrame, execEventSize+tailStrings(exec)+3, 1), ErrSizeMismatch},
		{"exec mask names a fifth key", patch(execFrame, maskOffset, 0x11), ErrSizeMismatch},
		{"exec filename_len past its limit", patch16(execFrame, lenOffset, uint16(maxFilename+1)), ErrSizeMismatch},
		{"exit slot length past the tail", patch(exitFrame, exitEventSize, 0xff), ErrSizeMismatch},
	}
	d := NewDecoder(fxKeys, fxBootTime)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ev, err := d.Decode(tc.frame)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Decode error = %v, want %v", err, tc.want)
			}
			if !reflect.DeepEqual(ev, Event{}) {
				t.Errorf("Decode returned a non-zero event with its error: %+v", ev)
			}
		})
	}
	for _, sentinel := range []error{ErrShortFrame, ErrUnknownKind, ErrSizeMismatch} {
		for _, other := range []error{ErrShortFrame, ErrUnknownKind, ErrSizeMismatch} {
			if sentinel != other && errors.Is(sentinel, other) {
				t.Errorf("%v matches %v: sentinels must be distinct", sentinel, other)
			}
		}
	}
}

// benchExecFrame is a realistic exec: five args, an audit ID, the
// systemd-driver cgroup names.
func benchExecFrame(b *testing.B) []byte {
	raw := fixtureExec()
	setArgv(&raw, "kubectl\x00exec\x00-it\x00my-pod\x00--\x00")
	raw.FilenameLen = setCString(raw.Filename[:], "/usr/local/bin/kubectl")
	raw.CgroupParentLen = setCString(raw.CgroupParent[:], "kubepods-burstable-pod"+strings.ReplaceAll(fxPodUID, "-", "_")+".slice")
	raw.CgroupLen = setCString(raw.Cgroup[:], "cri-containerd-"+fxCtrID+".scope")
	return encodeFrame(b, &raw)
}

var benchSink Event

func BenchmarkDecode(b *testing.B) {
	frame := benchExecFrame(b)
	d := NewDecoder(fxKeys, fxBootTime)
	if ev := decodeOK(b, d, frame); len(ev.Argv) != 5 || ev.AuditID != fxAuditID || ev.ContainerID != fxCtrID {
		b.Fatalf("benchmark frame decodes wrongly: %+v", ev)
	}
	b.SetBytes(int64(len(frame)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		benchSink, _ = d.Decode(frame)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

func BenchmarkDecodeExit(b *testing.B) {
	raw := fixtureExit()
	raw.ExitCode = 1 << 8
	frame := encodeFrame(b, &raw)
	d := NewDecoder(fxKeys, fxBootTime)
	decodeOK(b, d, frame)
	b.SetBytes(int64(len(frame)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		benchSink, _ = d.Decode(frame)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

// The key's text is what the store and the API hold: pinned here, edges
// included, since it is built by hand.
func TestProcessKey(t *testing.T) {
	for _, tc := range []struct {
		tgid  uint32
		start uint64
		want  string
	}{
		{0, 123 * ticksNs, ""},
		{1, 0, "1-0"},
		{4242, 123*ticksNs + ticksNs - 1, "4242-123"},
		{^uint32(0), ^uint64(0), "4294967295-1844674407370"},
	} {
		if got := ProcessKey(tc.tgid, tc.start); got != tc.want {
			t.Errorf("ProcessKey(%d, %d) = %q, want %q", tc.tgid, tc.start, got, tc.want)
		}
	}
}
