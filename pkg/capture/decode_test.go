package capture

import (
	"encoding/binary"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/execid/correlator/pkg/vocab"
)

func TestDecodeFrameLayout(t *testing.T) {
	// Sizes from bpf/include/correlator.h: the header is 16 bytes, an
	// id_slot 136, an id_wire 8; image_place 24; the fixed parts of exec
	// 104 + 24 + 8 (lengths and masks) and exit 56 + 8.
	for _, tc := range []struct {
		name string
		raw  any
		want int
	}{
		{"header", correlatorEventHeader{}, 16},
		{"id_slot", correlatorIdSlot{}, 136},
		{"image_place", correlatorImagePlace{}, 24},
		{"id_wire", correlatorIdWire{}, 8},
		{"exec_event", correlatorExecEvent{}, 104 + 24 + 8},
		{"exit_event", correlatorExitEvent{}, 56 + 8},
	} {
		if got := binary.Size(tc.raw); got != tc.want {
			t.Errorf("binary.Size(%s) = %d, want %d", tc.name, got, tc.want)
		}
		if got := int(reflect.TypeOf(tc.raw).Size()); got != tc.want {
			t.Errorf("in-memory size of %s = %d, want %d (implicit padding?)", tc.name, got, tc.want)
		}
	}
	if execEventSize != binary.Size(correlatorExecEvent{}) || exitEventSize != binary.Size(correlatorExitEvent{}) ||
		idWireSize != binary.Size(correlatorIdWire{}) {
		t.Errorf("decoder sizes exec=%d exit=%d id_wire=%d disagree with the encoded layout", execEventSize, exitEventSize, idWireSize)
	}
}

func TestDecodeExec(t *testing.T) {
	uuid128 := strings.Repeat(fxAuditID+"-", 4)[:128]
	tests := []struct {
		name string
		keys []string
		mod  func(r *execFixture)
		want func(e *Event)
		// tail is appended to the frame.
		tail []byte
		// err, when set, is the error the frame must decode to.
		err error
		// bug, when set, names a known defect in the code under test:
		// the case skips while it fails and errors once it passes.
		bug string
	}{
		{name: "session root", mod: func(*execFixture) {}, want: func(*Event) {}},
		{
			name: "time from boot time",
			mod:  func(r *execFixture) { r.Hdr.TimeNs = 86_400_000_000_001 },
			want: func(e *Event) { e.Time = time.Date(2025, 3, 5, 5, 6, 7, 1, time.UTC) },
		},
		{
			name: "process keys at tick precision",
			mod: func(r *execFixture) {
				r.StartNs, r.ParentStartNs = 9_999_999, 10_000_000
				r.RootTgid, r.RootStartNs = 1, 19_999_999_999
			},
			want: func(e *Event) {
				e.ProcessID, e.ParentProcessID, e.SessionRootID = "4242-0", "4100-1", "1-1999"
				e.StartBootNs, e.ParentStartNs = 9_999_999, 10_000_000
			},
		},
		{
			name: "no session root",
			mod:  func(r *execFixture) { r.RootTgid, r.RootStartNs, r.Depth = 0, 0, 0 },
			want: func(e *Event) { e.SessionRootID = "" },
		},
		{
			name: "inherited at depth",
			mod: func(r *execFixture) {
				r.RootTgid, r.RootStartNs, r.Depth = 4000, 99_990_000_000, 3
				r.Ids[0].Source = uint8(correlatorIdSourceID_SOURCE_INHERITED)
			},
			want: func(e *Event) {
				e.SessionRootID, e.Depth, e.Source = "4000-9999", 3, vocab.SourceInherited
			},
		},
		{
			name: "procfs source",
			mod:  func(r *execFixture) { r.Ids[0].Source = uint8(correlatorIdSourceID_SOURCE_PROCFS) },
			want: func(e *Event) { e.Source = vocab.SourceProcfs },
		},
		{
			name: "no id: source none hides a stale value",
			mod: func(r *execFixture) {
				r.Ids[0].Source = uint8(correlatorIdSourceID_SOURCE_NONE)
			},
			want: func(e *Event) { e.AuditID, e.Source = "", vocab.SourceNone },
		},
		{
			name: "several args with an empty one inside",
			mod:  func(r *execFixture) { setArgv(r, "printf\x00%s|%s\x00\x00b\x00") },
			want: func(e *Event) { e.Argv = []string{"printf", "%s|%s", "", "b"} },
		},
		{
			name: "empty argument last",
			mod:  func(r *execFixture) { setArgv(r, "printf\x00%s\x00\x00") },
			want: func(e *Event) { e.Argv = []string{"printf", "%s", ""} },
		},
		{
			name: "single empty argument",
			mod:  func(r *execFixture) { setArgv(r, "\x00") },
			want: func(e *Event) { e.Argv = []string{""} },
		},
		{
			name: "no argv",
			mod:  func(r *execFixture) { setArgv(r, "") },
			want: func(e *Event) { e.Argv = nil },
		},
		{
			name: "argv_len ignores bytes past it",
			mod:  func(r *execFixture) { setArgv(r, "sh\x00-c\x00echo hi\x00"); r.ArgvLen = 5 },
			want: func(e *Event) { e.Argv = []string{"sh", "-c"} },
		},
		{
			name: "argv truncated",
			mod: func(r *execFixture) {
				setArgv(r, "sh\x00-c\x00echo hel") // cut inside the last arg: no NUL
				r.Flags |= uint32(correlatorEventFlagEVENT_FLAG_ARGV_TRUNCATED)
			},
			want: func(e *Event) {
				e.Argv = []string{"sh", "-c", "echo hel"}
				e.ArgvTruncated = true
				e.Flags = []string{vocab.FlagArgvTruncated}
			},
		},
		{
			name: "argv full and argv_len beyond the array",
			mod: func(r *execFixture) {
				for i := range r.Argv {
					r.Argv[i] = 'a'
				}
				r.Argv[1] = 0
				r.ArgvLen = 0xffff
				r.Flags |= uint32(correlatorEventFlagEVENT_FLAG_ARGV_TRUNCATED)
			},
			err: ErrSizeMismatch,
		},
		{
			name: "filename_len shorter than the string",
			mod:  func(r *execFixture) { r.FilenameLen = 8 },
			want: func(e *Event) { e.Filename = "/usr/bin" },
		},
		{
			name: "filename full and filename_len beyond the array",
			mod: func(r *execFixture) {
				for i := range r.Filename {
					r.Filename[i] = 'f'
				}
				r.FilenameLen = 0xffff
			},
			err: ErrSizeMismatch,
		},
		{
			name: "filename_len past a NUL",
			mod:  func(r *execFixture) { r.FilenameLen = 200 },
			want: func(*Event) {},
		},
		{
			name: "systemd driver cgroup",
			mod: func(r *execFixture) {
				r.CgroupParentLen = setCString(r.CgroupParent[:], "kubepods-burstable-pod"+strings.ReplaceAll(fxPodUID, "-", "_")+".slice")
				r.CgroupLen = setCString(r.Cgroup[:], "cri-containerd-"+fxCtrID+".scope")
			},
			want: func(e *Event) {
				e.Cgroup = "kubepods-burstable-pod" + strings.ReplaceAll(fxPodUID, "-", "_") + ".slice/cri-containerd-" + fxCtrID + ".scope"
			},
		},
		{
			name: "host process under the root cgroup's child",
			mod: func(r *execFixture) {
				r.CgroupParentLen = setCString(r.CgroupParent[:], "/")
				r.CgroupLen = setCString(r.Cgroup[:], "init.scope")
			},
			want: func(e *Event) { e.Cgroup, e.ContainerID, e.PodUID = "init.scope", "", "" },
		},
		{
			name: "no parent cgroup",
			mod: func(r *execFixture) {
				r.CgroupParentLen = setCString(r.CgroupParent[:], "")
			},
			want: func(e *Event) { e.Cgroup, e.PodUID = fxCtrID, "" },
		},
		{
			name: "cgroup lengths beyond the arrays",
			mod: func(r *execFixture) {
				for i := range r.Cgroup {
					r.Cgroup[i], r.CgroupParent[i] = 'c', 'p'
				}
				r.CgroupLen, r.CgroupParentLen = 0xffff, 129
			},
			err: ErrSizeMismatch,
		},
		{
			name: "cgroup names at their limits",
			mod: func(r *execFixture) {
				for i := range r.Cgroup {
					r.Cgroup[i], r.CgroupParent[i] = 'c', 'p'
				}
				r.CgroupLen, r.CgroupParentLen = uint16(maxCgroupLen), uint16(maxCgroupLen)
			},
			want: func(e *Event) {
				e.Cgroup = strings.Repeat("p", maxCgroupLen) + "/" + strings.Repeat("c", maxCgroupLen)
				e.ContainerID, e.PodUID = "", ""
			},
		},
		{
			name: "env mismatch keeps the claim",
			mod: func(r *execFixture) {
				setSlot(&r.Ids[0], fxAuditID, correlatorIdSourceID_SOURCE_INHERITED, correlatorKeyFlagKEY_FLAG_ENV_MISMATCH)
				setSlot(&r.Claimed[0], fxClaimed, correlatorIdSourceID_SOURCE_ENV, 0)
			},
			want: func(e *Event) {
				e.Source, e.ClaimedAuditID = vocab.SourceInherited, fxClaimed
				e.Flags = []string{vocab.FlagEnvMismatch}
			},
		},
		{
			name: "claimed slot without source is ignored",
			mod: func(r *execFixture) {
				setSlot(&r.Claimed[0], fxClaimed, correlatorIdSourceID_SOURCE_NONE, correlatorKeyFlagKEY_FLAG_ID_TRUNCATED)
			},
			want: func(*Event) {},
		},
		{
			name: "env removed",
			mod: func(r *execFixture) {
				setSlot(&r.Ids[0], fxAuditID, correlatorIdSourceID_SOURCE_INHERITED, correlatorKeyFlagKEY_FLAG_ENV_REMOVED)
			},
			want: func(e *Event) { e.Source, e.Flags = vocab.SourceInherited, []string{vocab.FlagEnvRemoved} },
		},
		{
			name: "root unverified and duplicate key",
			mod: func(r *execFixture) {
				r.Ids[0].Flags = uint32(correlatorKeyFlagKEY_FLAG_ROOT_UNVERIFIED | correlatorKeyFlagKEY_FLAG_DUPLICATE_KEY)
			},
			want: func(e *Event) { e.Flags = []string{vocab.FlagRootUnverified, vocab.FlagDuplicateKey} },
		},
		{
			name: "root set by the runtime's first image",
			mod: func(r *execFixture) {
				r.Origin = uint32(correlatorExecOriginEXEC_ORIGIN_RUNTIME_CHILD)
				r.Ids[0].Flags = uint32(correlatorKeyFlagKEY_FLAG_ROOT_UNVERIFIED | correlatorKeyFlagKEY_FLAG_ROOT_INDIRECT)
			},
			want: func(e *Event) {
				e.ExecOrigin = OriginRuntimeChild
				e.Flags = []string{vocab.FlagRootUnverified, vocab.FlagRootIndirect}
			},
		},
		{
			name: "exec origin inside the container",
			mod:  func(r *execFixture) { r.Origin = uint32(correlatorExecOriginEXEC_ORIGIN_INSIDE) },
			want: func(e *Event) { e.ExecOrigin = OriginInside },
		},
		{
			name: "exec origin this build does not know reads as unknown",
			mod:  func(r *execFixture) { r.Origin = 99 },
			want: func(e *Event) { e.ExecOrigin = OriginUnknown },
		},
		{
			name: "id truncated is nonstandard",
			mod: func(r *execFixture) {
				setSlot(&r.Ids[0], uuid128, correlatorIdSourceID_SOURCE_ENV, correlatorKeyFlagKEY_FLAG_ID_TRUNCATED)
			},
			want: func(e *Event) {
				e.AuditID = uuid128
				e.Flags = []string{vocab.FlagIDTruncated, vocab.FlagNonstandardID}
			},
		},
		{
			name: "truncated claim marks the key",
			mod: func(r *execFixture) {
				setSlot(&r.Ids[0], fxAuditID, correlatorIdSourceID_SOURCE_INHERITED, correlatorKeyFlagKEY_FLAG_ENV_MISMATCH)
				setSlot(&r.Claimed[0], uuid128, correlatorIdSourceID_SOURCE_ENV, correlatorKeyFlagKEY_FLAG_ID_TRUNCATED)
			},
			want: func(e *Event) {
				e.Source, e.ClaimedAuditID = vocab.SourceInherited, uuid128
				// The claim's truncation is flagged on the key; the
				// authoritative value is a UUID, so not nonstandard.
				e.Flags = []string{vocab.FlagEnvMismatch, vocab.FlagIDTruncated}
			},
		},
		{
			name: "slot len beyond the array",
			mod: func(r *execFixture) {
				setSlot(&r.Ids[0], uuid128, correlatorIdSourceID_SOURCE_ENV, 0)
				r.Ids[0].Len = 0xffff
			},
			err: ErrSizeMismatch,
		},
		{
			name: "placeholder",
			mod:  func(r *execFixture) { setSlot(&r.Ids[0], "unknown", correlatorIdSourceID_SOURCE_ENV, 0) },
			want: func(e *Event) { e.AuditID, e.Flags = "unknown", []string{vocab.FlagPlaceholder} },
		},
		{
			name: "non-UUID id",
			mod:  func(r *execFixture) { setSlot(&r.Ids[0], "abc", correlatorIdSourceID_SOURCE_ENV, 0) },
			want: func(e *Event) { e.AuditID, e.Flags = "abc", []string{vocab.FlagNonstandardID} },
		},
		{
			name: "UUID with one bad character",
			mod: func(r *execFixture) {
				setSlot(&r.Ids[0], fxAuditID[:35]+"g", correlatorIdSourceID_SOURCE_ENV, 0)
			},
			want: func(e *Event) { e.AuditID, e.Flags = fxAuditID[:35]+"g", []string{vocab.FlagNonstandardID} },
		},
		{
			name: "empty id value present",
			mod:  func(r *execFixture) { setSlot(&r.Ids[0], "", correlatorIdSourceID_SOURCE_ENV, 0) },
			want: func(e *Event) { e.AuditID, e.Flags = "", []string{vocab.FlagNonstandardID} },
		},
		{
			name: "every event flag",
			mod: func(r *execFixture) {
				r.Flags = uint32(correlatorEventFlagEVENT_FLAG_SCAN_TRUNCATED | correlatorEventFlagEVENT_FLAG_SCAN_ERROR |
					correlatorEventFlagEVENT_FLAG_STALE_LINEAGE | correlatorEventFlagEVENT_FLAG_LINEAGE_FULL | 1<<20)
			},
			want: func(e *Event) {
				e.Flags = []string{vocab.FlagScanTruncated, vocab.FlagScanError, vocab.FlagStaleLineage, vocab.FlagLineageFull}
			},
		},
		{
			name: "second key goes to Keys",
			mod: func(r *execFixture) {
				setSlot(&r.Ids[1], fxSPOUID, correlatorIdSourceID_SOURCE_INHERITED, correlatorKeyFlagKEY_FLAG_ENV_MISMATCH)
				setSlot(&r.Claimed[1], "spoofed", correlatorIdSourceID_SOURCE_ENV, 0)
				// Slots past the configured keys are not reported.
				setSlot(&r.Ids[2], "stray", correlatorIdSourceID_SOURCE_ENV, 0)
			},
			want: func(e *Event) {
				e.Keys = map[string]KeyValue{fxSPOKey: {
					Value: fxSPOUID, Claimed: "spoofed", Source: vocab.SourceInherited,
					Flags: []string{vocab.FlagEnvMismatch},
				}}
			},
		},
		{
			name: "second key placeholder without audit id",
			mod: func(r *execFixture) {
				r.Ids[0] = correlatorIdSlot{}
				setSlot(&r.Ids[1], "unknown", correlatorIdSourceID_SOURCE_PROCFS, 0)
			},
			want: func(e *Event) {
				e.AuditID, e.Source = "", vocab.SourceNone
				e.Keys = map[string]KeyValue{fxSPOKey: {Value: "unknown", Source: vocab.SourceProcfs, Flags: []string{vocab.FlagPlaceholder}}}
			},
		},
		{
			name: "second key with only a flag",
			mod: func(r *execFixture) {
				r.Ids[1].Flags = uint32(correlatorKeyFlagKEY_FLAG_DUPLICATE_KEY)
			},
			want: func(e *Event) {
				e.Keys = map[string]KeyValue{fxSPOKey: {Flags: []string{vocab.FlagDuplicateKey}}}
			},
		},
		{
			name: "four keys",
			keys: []string{fxAuditKey, "A", "B", "C"},
			mod: func(r *execFixture) {
				setSlot(&r.Ids[3], "c-value", correlatorIdSourceID_SOURCE_ENV, 0)
			},
			want: func(e *Event) {
				e.Keys = map[string]KeyValue{"C": {Value: "c-value", Source: vocab.SourceEnv, Flags: []string{vocab.FlagNonstandardID}}}
			},
		},
		{
			name: "more keys than slots",
			keys: []string{fxAuditKey, "A", "B", "C", "D"},
			mod:  func(*execFixture) {},
			want: func(*Event) {},
		},
		{
			name: "no keys configured",
			keys: []string{},
			mod:  func(*execFixture) {},
			want: func(e *Event) { e.AuditID, e.Source = "", vocab.SourceNone },
		},
		{
			name: "trailing bytes after the frame",
			mod:  func(*execFixture) {},
			want: func(*Event) {},
			tail: []byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			keys := fxKeys
			if tc.keys != nil {
				keys = tc.keys
			}
			raw := fixtureExec()
			tc.mod(&raw)
			frame := append(encodeFrame(t, &raw), tc.tail...)
			if tc.err != nil {
				if ev, err := NewDecoder(keys, fxBootTime).Decode(frame); !errors.Is(err, tc.err) || !reflect.DeepEqual(ev, Event{}) {
					t.Fatalf("Decode = %+v, %v; want no event and %v", ev, err, tc.err)
				}
				return
			}
			want := fixtureExecEvent()
			tc.want(&want)
			got := decodeOK(t, NewDecoder(keys, fxBootTime), frame)
			if got.Flags == nil {
				t.Errorf("Flags is nil; want an empty list so JSON shows []")
			}
			got, want = normalize(got), normalize(want)
			equal := reflect.DeepEqual(got, want)
			switch {
			case !equal && tc.bug != "":
				t.Skipf("BUG: %s: Argv = %q, want %q", tc.bug, got.Argv, want.Argv)
			case equal && tc.bug != "":
				t.Errorf("known bug %q no longer reproduces: drop the bug note", tc.bug)
			case !equal:
				t.Errorf("Decode mismatch\n got: %+v\nwant: %+v", got, want)
			}
		})
	}
}

// TestDecodeNoAlias checks the decoder does not retain the frame: a ring
// buffer reader reuses its sample buffer.
func TestDecodeNoAlias(t *testing.T) {
	raw := fixtureExec()
	frame := encodeFrame(t, &raw)
	ev := decodeOK(t, NewDecoder(fxKeys, fxBootTime), frame)
	clear(frame)
	if want := fixtureExecEvent(); !reflect.DeepEqual(normalize(ev), normalize(want)) {
		t.Errorf("event changed after the frame was cleared:\n got: %+v\nwant: %+v", ev, want)
	}
}
