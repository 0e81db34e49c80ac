package capture

import (
	"bytes"
	"encoding/binary"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The seed corpora under testdata/fuzz are committed. Frames are generated
// from the bpf2go structs; after a layout change, regenerate them with
//
//	go test ./pkg/capture -run TestDecodeFuzzCorpus -update-corpus
var fxUpdateCorpus = flag.Bool("update-corpus", false, "rewrite the generated seed corpora under testdata/fuzz")

// corpusEntry renders one file in the "go test fuzz v1" format.
func corpusEntry(args ...any) []byte {
	var b bytes.Buffer
	b.WriteString("go test fuzz v1\n")
	for _, a := range args {
		switch v := a.(type) {
		case []byte:
			fmt.Fprintf(&b, "[]byte(%q)\n", v)
		case string:
			fmt.Fprintf(&b, "string(%q)\n", v)
		case uint32:
			fmt.Fprintf(&b, "uint32(%d)\n", v)
		case uint64:
			fmt.Fprintf(&b, "uint64(%d)\n", v)
		default:
			panic(fmt.Sprintf("corpusEntry: unsupported %T", a))
		}
	}
	return b.Bytes()
}

// decodeSeeds are the generated FuzzDecode seeds, by corpus file name.
func decodeSeeds(t testing.TB) map[string][]byte {
	exec := fixtureExec()
	execFrame := encodeFrame(t, &exec)
	trunc := fixtureExec()
	setArgv(&trunc, strings.Repeat("arg\x00", 256))
	trunc.Flags = uint32(correlatorEventFlagEVENT_FLAG_ARGV_TRUNCATED | correlatorEventFlagEVENT_FLAG_SCAN_TRUNCATED)
	setSlot(&trunc.Ids[0], fxAuditID, correlatorIdSourceID_SOURCE_INHERITED, correlatorKeyFlagKEY_FLAG_ENV_MISMATCH)
	setSlot(&trunc.Claimed[0], strings.Repeat("z", 128), correlatorIdSourceID_SOURCE_ENV, correlatorKeyFlagKEY_FLAG_ID_TRUNCATED)
	setSlot(&trunc.Ids[1], "unknown", correlatorIdSourceID_SOURCE_PROCFS, 0)
	exit := fixtureExit()
	exit.ExitCode = 1 << 8
	exitFrame := encodeFrame(t, &exit)
	killed := fixtureExit()
	killed.ExitCode = 0x80 | 9
	garbage := make([]byte, 64)
	for i := range garbage {
		garbage[i] = byte(i*37 + 11)
	}
	return map[string][]byte{
		"exec-frame":           execFrame,
		"exec-frame-flags":     encodeFrame(t, &trunc),
		"exit-frame":           exitFrame,
		"exit-frame-signal":    encodeFrame(t, &killed),
		"exec-frame-truncated": execFrame[:execEventSize/2],
		"exit-frame-truncated": exitFrame[:exitEventSize-1],
		"exec-tail-truncated":  execFrame[:len(execFrame)-1],
		"exit-tail-truncated":  exitFrame[:len(exitFrame)-1],
		"header-only":          execFrame[:headerSize],
		"short":                execFrame[:7],
		"unknown-kind":         append([]byte{9, 0, 0, 0}, exitFrame[4:]...),
		"garbage":              garbage,
		"empty":                {},
	}
}

// otherSeeds are the committed seeds of the parser fuzzers, by fuzzer and
// corpus file name: real inputs from a hybrid cgroup v1/v2 node.
func otherSeeds() map[string]map[string][]any {
	return map[string]map[string][]any{
		"FuzzParseCgroupPath": cgroupPathSeeds(),
		"FuzzCgroupLayout":    cgroupLayoutSeeds(),
		"FuzzParseEnviron": {
			"kubectl-exec": {[]byte("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\x00HOSTNAME=web-0\x00TERM=xterm\x00" +
				fxAuditKey + "=" + fxAuditID + "\x00HOME=/root\x00"), fxAuditKey},
			"multiline-decoy": {[]byte("SCRIPT=echo a\n" + fxAuditKey + "=fake\x00" + fxAuditKey + "=" + fxAuditID + "\x00" + fxAuditKey + "=dup\x00"), fxAuditKey},
			"relaxed-name":    {[]byte("Logging:LogLevel:Default=$(FOO)\x00ID="), "Logging:LogLevel:Default"},
		},
		"FuzzParseStat": {
			"bash":        {"bash", uint32(4100), uint64(987654)},
			"parentheses": {"(a) b)", uint32(1), uint64(12)},
		},
	}
}

// TestDecodeFuzzCorpus checks the committed seeds are current: the real
// frames among them must still decode, or the fuzzer starts from noise.
func TestDecodeFuzzCorpus(t *testing.T) {
	all := otherSeeds()
	all["FuzzDecode"] = map[string][]any{}
	for name, b := range decodeSeeds(t) {
		all["FuzzDecode"][name] = []any{b}
	}
	d := NewDecoder(fxKeys, fxBootTime)
	for fuzzer, seeds := range all {
		dir := filepath.Join("testdata", "fuzz", fuzzer)
		for name, args := range seeds {
			path := filepath.Join(dir, name)
			want := corpusEntry(args...)
			if *fxUpdateCorpus {
				if err := os.MkdirAll(dir, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, want, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			got, err := os.ReadFile(path)
			if err != nil || !bytes.Equal(got, want) {
				t.Errorf("seed %s is missing or stale (%v); regenerate with -update-corpus", path, err)
				continue
			}
			if fuzzer != "FuzzDecode" || !strings.Contains(name, "-frame") || strings.HasSuffix(name, "-truncated") {
				continue
			}
			if _, err := d.Decode(args[0].([]byte)); err != nil {
				t.Errorf("seed %s does not decode: %v", path, err)
			}
		}
	}
}

func FuzzDecode(f *testing.F) {
	for _, b := range decodeSeeds(f) {
		f.Add(b)
	}
	d := NewDecoder(fxKeys, fxBootTime)
	f.Fuzz(func(t *testing.T, b []byte) {
		ev, err := d.Decode(b)
		if err != nil {
			if ev.Kind != "" || ev.ProcessID != "" {
				t.Fatalf("error %v came with a non-zero event %+v", err, ev)
			}
			return
		}
		// The decoder's intern tables (warm from every earlier input)
		// change nothing: a fresh decoder reads the frame alike.
		if fresh, _ := NewDecoder(fxKeys, fxBootTime).Decode(b); !reflect.DeepEqual(ev, fresh) {
			t.Fatalf("a warm decoder read\n%+v\nwhere a fresh one reads\n%+v", ev, fresh)
		}
		// A decoded frame round-trips its fixed fields: read them again
		// through encoding/binary, independently of the decoder. The tail
		// must have been accounted for exactly and within the limits.
		if size := binary.LittleEndian.Uint32(b[4:8]); int(size) > len(b) {
			t.Fatalf("decoded a frame whose header says %d bytes from %d", size, len(b))
		}
		switch ev.Kind {
		case KindExec:
			var r correlatorExecEvent
			if err := binary.Read(bytes.NewReader(b), binary.LittleEndian, &r); err != nil {
				t.Fatalf("re-reading exec frame: %v", err)
			}
			checkCommon(t, ev, r.Hdr.TimeNs, r.Tgid, r.Ppid, r.StartNs, r.IdsMask)
			if ev.ParentProcessID != ProcessKey(r.Ppid, r.ParentStartNs) {
				t.Errorf("ParentProcessID = %q, want %q", ev.ParentProcessID, ProcessKey(r.Ppid, r.ParentStartNs))
			}
			if ev.ArgvTruncated != (r.Flags&uint32(correlatorEventFlagEVENT_FLAG_ARGV_TRUNCATED) != 0) {
				t.Errorf("ArgvTruncated = %v with flags %#x", ev.ArgvTruncated, r.Flags)
			}
			n := 0
			for _, a := range ev.Argv {
				if strings.IndexByte(a, 0) >= 0 {
					t.Errorf("argument %q holds a NUL", a)
				}
				n += len(a) + 1
			}
			if n > int(r.ArgvLen)+1 || int(r.ArgvLen) > maxArgvLen {
				t.Errorf("argv of %d bytes from argv_len %d", n, r.ArgvLen)
			}
			if len(ev.Filename) > int(r.FilenameLen) || strings.IndexByte(ev.Filename, 0) >= 0 {
				t.Errorf("Filename %q is longer than filename_len %d or holds a NUL", ev.Filename, r.FilenameLen)
			}
			want := execEventSize + int(r.FilenameLen) + int(r.ArgvLen) + int(r.CgroupLen) + int(r.CgroupParentLen)
			if int(r.Hdr.Size) < want {
				t.Errorf("size %d is less than the fixed part and strings, %d", r.Hdr.Size, want)
			}
			if ev.ClaimedAuditID != "" && r.ClaimedMask&1 == 0 {
				t.Errorf("ClaimedAuditID %q without a claimed slot", ev.ClaimedAuditID)
			}
			if ev.ContainerID != "" && !isHexID(ev.ContainerID) {
				t.Errorf("ContainerID %q is not a 64-hex ID", ev.ContainerID)
			}
		case KindExit:
			var r correlatorExitEvent
			if err := binary.Read(bytes.NewReader(b), binary.LittleEndian, &r); err != nil {
				t.Fatalf("re-reading exit frame: %v", err)
			}
			checkCommon(t, ev, r.Hdr.TimeNs, r.Tgid, r.Ppid, r.StartNs, r.IdsMask)
			if ev.ExitCode == nil || *ev.ExitCode < 0 || *ev.ExitCode > 255 {
				t.Fatalf("ExitCode = %v, want 0..255", ev.ExitCode)
			}
			if ev.Signal < 0 || ev.Signal > 127 || (ev.Signal != 0 && *ev.ExitCode != 128+ev.Signal) {
				t.Errorf("Signal %d with ExitCode %d", ev.Signal, *ev.ExitCode)
			}
		default:
			t.Fatalf("decoded kind %q", ev.Kind)
		}
	})
}

func checkCommon(t *testing.T, ev Event, timeNs uint64, tgid, ppid uint32, start uint64, idsMask uint8) {
	t.Helper()
	if want := fxBootTime.Add(time.Duration(timeNs)); !ev.Time.Equal(want) {
		t.Errorf("Time = %v, want %v", ev.Time, want)
	}
	if ev.PID != tgid || ev.PPID != ppid || ev.StartBootNs != start {
		t.Errorf("PID/PPID/start = %d/%d/%d, want %d/%d/%d", ev.PID, ev.PPID, ev.StartBootNs, tgid, ppid, start)
	}
	if ev.ProcessID != ProcessKey(tgid, start) {
		t.Errorf("ProcessID = %q, want %q", ev.ProcessID, ProcessKey(tgid, start))
	}
	if ev.AuditID != "" && idsMask&1 == 0 {
		t.Errorf("AuditID %q without a slot for it", ev.AuditID)
	}
	if len(ev.AuditID) > maxIDLen {
		t.Errorf("AuditID of %d bytes, more than the kernel sends", len(ev.AuditID))
	}
	if ev.Flags == nil {
		t.Errorf("Flags is nil")
	}
	if _, ok := ev.Keys[fxAuditKey]; ok {
		t.Errorf("Keys holds the audit ID key")
	}
}

// refEnviron is the obvious reading of an environment block, for
// differential fuzzing: split at NUL, first "KEY=" entry wins.
func refEnviron(b []byte, key string) envValue {
	var v envValue
	for _, e := range bytes.Split(b, []byte{0}) {
		val, ok := bytes.CutPrefix(e, []byte(key+"="))
		if !ok {
			continue
		}
		if v.Found {
			v.Duplicate = true
			continue
		}
		v.Found = true
		if len(val) > 128 {
			val, v.Truncated = val[:128], true
		}
		v.Value = string(val)
	}
	return v
}

func FuzzParseEnviron(f *testing.F) {
	f.Add([]byte(fxAuditKey+"="+fxAuditID+"\x00PATH=/bin\x00"), fxAuditKey)
	f.Add([]byte("A=1\nID=fake\x00ID=\x00ID=2"), "ID")
	f.Add([]byte("Logging:LogLevel:Default=$(FOO)\x00"), "Logging:LogLevel:Default")
	f.Add([]byte(fxAuditKey+"="+strings.Repeat("v", 130)), fxAuditKey)
	f.Add([]byte{}, "K")
	f.Fuzz(func(t *testing.T, b []byte, key string) {
		_ = parseEnviron(b, fxKeys) // any block, the shipped keys: no panic
		if validateKey(key) != nil {
			return // Config.Validate never lets such a key through
		}
		got := parseEnviron(b, []string{key, fxSPOKey})
		if len(got) != 2 {
			t.Fatalf("parseEnviron returned %d values for 2 keys", len(got))
		}
		if want := refEnviron(b, key); got[0] != want {
			t.Errorf("parseEnviron(%q, %q) = %+v, want %+v", b, key, got[0], want)
		}
	})
}

func FuzzParseStat(f *testing.F) {
	f.Add("bash", uint32(4100), uint64(987654))
	f.Add("(a) b)", uint32(1), uint64(0))
	f.Add("x) S 9 9 9", uint32(0), uint64(1<<63))
	f.Add("1 (x) S", uint32(2), uint64(3))
	f.Fuzz(func(t *testing.T, comm string, ppid uint32, start uint64) {
		_, _, _ = parseStat([]byte(comm)) // garbage: no panic
		// The kernel's comm is at most 15 bytes and has no NUL; anything
		// else in it, spaces and parentheses included, must not shift the
		// fields.
		if len(comm) > 15 || strings.IndexByte(comm, 0) >= 0 {
			return
		}
		line := statLine(comm, strconv.FormatUint(uint64(ppid), 10), strconv.FormatUint(start, 10))
		gotPPID, gotStart, err := parseStat([]byte(line))
		if err != nil || gotPPID != ppid || gotStart != start {
			t.Errorf("parseStat(%q) = (%d, %d, %v), want (%d, %d, nil)", line, gotPPID, gotStart, err, ppid, start)
		}
	})
}
