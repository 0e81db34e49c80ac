package capture

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestParseEnviron(t *testing.T) {
	long := strings.Repeat("x", 200)
	tests := []struct {
		name  string
		block string
		keys  []string
		want  []envValue
	}{
		{
			name:  "key first",
			block: fxAuditKey + "=" + fxAuditID + "\x00PATH=/bin\x00HOME=/root\x00",
			want:  []envValue{{Value: fxAuditID, Found: true}, {}},
		},
		{
			name:  "key in the middle",
			block: "PATH=/bin\x00" + fxAuditKey + "=" + fxAuditID + "\x00HOME=/root\x00",
			want:  []envValue{{Value: fxAuditID, Found: true}, {}},
		},
		{
			name:  "key last",
			block: "PATH=/bin\x00HOME=/root\x00" + fxAuditKey + "=" + fxAuditID + "\x00",
			want:  []envValue{{Value: fxAuditID, Found: true}, {}},
		},
		{
			name:  "both keys",
			block: fxSPOKey + "=" + fxSPOUID + "\x00PATH=/bin\x00" + fxAuditKey + "=" + fxAuditID + "\x00",
			want:  []envValue{{Value: fxAuditID, Found: true}, {Value: fxSPOUID, Found: true}},
		},
		{
			name:  "duplicate: first wins",
			block: fxAuditKey + "=first\x00PATH=/bin\x00" + fxAuditKey + "=second\x00" + fxAuditKey + "=third\x00",
			want:  []envValue{{Value: "first", Found: true, Duplicate: true}, {}},
		},
		{
			name:  "duplicate after an empty first value",
			block: fxAuditKey + "=\x00" + fxAuditKey + "=second\x00",
			want:  []envValue{{Value: "", Found: true, Duplicate: true}, {}},
		},
		{
			name:  "longer name with the key as prefix",
			block: fxAuditKey + "_OLD=x\x00",
			want:  []envValue{{}, {}},
		},
		{
			name:  "longer name with the key as suffix",
			block: "X" + fxAuditKey + "=x\x00",
			want:  []envValue{{}, {}},
		},
		{
			name:  "key without '='",
			block: fxAuditKey + "\x00" + fxAuditKey + "\x00",
			want:  []envValue{{}, {}},
		},
		{
			name:  "key inside a multi-line value is not a variable",
			block: "SCRIPT=line1\n" + fxAuditKey + "=fake\nline3\x00PATH=/bin\x00",
			want:  []envValue{{}, {}},
		},
		{
			name:  "multi-line decoy before the real key",
			block: "SCRIPT=a\n" + fxAuditKey + "=fake\x00" + fxAuditKey + "=" + fxAuditID + "\x00",
			want:  []envValue{{Value: fxAuditID, Found: true}, {}},
		},
		{
			name:  "multi-line value of the key itself is kept whole",
			block: fxAuditKey + "=a\nb\x00",
			want:  []envValue{{Value: "a\nb", Found: true}, {}},
		},
		{
			name:  "relaxed name",
			block: "PATH=/bin\x00Logging:LogLevel:Default=Warning\x00",
			keys:  []string{"Logging:LogLevel:Default"},
			want:  []envValue{{Value: "Warning", Found: true}},
		},
		{
			name:  "value with '=' and $(FOO) kept literally",
			block: fxAuditKey + "=$(FOO)=a=b\x00",
			want:  []envValue{{Value: "$(FOO)=a=b", Found: true}, {}},
		},
		{
			name:  "empty value",
			block: fxAuditKey + "=\x00",
			want:  []envValue{{Value: "", Found: true}, {}},
		},
		{
			name:  "value of exactly 128 bytes",
			block: fxAuditKey + "=" + long[:128] + "\x00",
			want:  []envValue{{Value: long[:128], Found: true}, {}},
		},
		{
			name:  "value of 129 bytes is truncated",
			block: fxAuditKey + "=" + long[:129] + "\x00",
			want:  []envValue{{Value: long[:128], Found: true, Truncated: true}, {}},
		},
		{
			name:  "long value is truncated",
			block: fxAuditKey + "=" + long + "\x00",
			want:  []envValue{{Value: long[:128], Found: true, Truncated: true}, {}},
		},
		{
			name:  "no trailing NUL",
			block: "PATH=/bin\x00" + fxAuditKey + "=" + fxAuditID,
			want:  []envValue{{Value: fxAuditID, Found: true}, {}},
		},
		{
			name:  "empty entries",
			block: "\x00\x00" + fxAuditKey + "=" + fxAuditID + "\x00\x00",
			want:  []envValue{{Value: fxAuditID, Found: true}, {}},
		},
		{
			name:  "empty block",
			block: "",
			want:  []envValue{{}, {}},
		},
		{
			name:  "no keys",
			block: fxAuditKey + "=x\x00",
			keys:  []string{},
			want:  []envValue{},
		},
		{
			name:  "short key",
			block: "IDX=1\x00I=2\x00ID=3\x00",
			keys:  []string{"ID"},
			want:  []envValue{{Value: "3", Found: true}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			keys := fxKeys
			if tc.keys != nil {
				keys = tc.keys
			}
			got := parseEnviron([]byte(tc.block), keys)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("parseEnviron(%q, %q)\n got: %+v\nwant: %+v", tc.block, keys, got, tc.want)
			}
		})
	}
}

// statLine is a /proc/<pid>/stat line with the given comm, ppid and start
// time (field 22), the other fields as a real process has them.
func statLine(comm, ppid, start string) string {
	return "4242 (" + comm + ") S " + ppid + " 4242 4242 0 -1 4194560 1234 0 0 0 5 3 0 0 20 0 1 0 " +
		start + " 12345678 456 18446744073709551615 1 1 0 0 0 0 0 0 65536 0 0 0 17 3 0 0 0 0 0\n"
}

func TestParseStat(t *testing.T) {
	tests := []struct {
		name      string
		line      string
		wantPPID  uint32
		wantStart uint64
		wantErr   bool
		wantBad   bool // the error is errBadStat
	}{
		{name: "normal", line: statLine("bash", "4100", "987654"), wantPPID: 4100, wantStart: 987654},
		{name: "comm with spaces", line: statLine("my prog", "1", "7"), wantPPID: 1, wantStart: 7},
		{name: "comm with parentheses", line: statLine("(a) b)", "17", "2"), wantPPID: 17, wantStart: 2},
		{name: "comm mimicking fields", line: statLine("x) S 9 9 9", "3", "44"), wantPPID: 3, wantStart: 44},
		{name: "empty comm", line: statLine("", "5", "6"), wantPPID: 5, wantStart: 6},
		{name: "ppid zero (init)", line: statLine("systemd", "0", "1"), wantPPID: 0, wantStart: 1},
		{name: "max ppid and start", line: statLine("x", "4294967295", "18446744073709551615"), wantPPID: 4294967295, wantStart: 18446744073709551615},
		{name: "exactly the fields needed", line: "1 (x) S 2 " + strings.Repeat("0 ", 17) + "99", wantPPID: 2, wantStart: 99},
		{name: "one field too few", line: "1 (x) S 2 " + strings.Repeat("0 ", 16) + "99", wantErr: true, wantBad: true},
		{name: "no comm", line: "1 x S 2 3", wantErr: true, wantBad: true},
		{name: "empty", line: "", wantErr: true, wantBad: true},
		{name: "only comm", line: "1 (x)", wantErr: true, wantBad: true},
		{name: "non-numeric ppid", line: statLine("x", "abc", "1"), wantErr: true},
		{name: "negative ppid", line: statLine("x", "-1", "1"), wantErr: true},
		{name: "ppid above 32 bits", line: statLine("x", "4294967296", "1"), wantErr: true},
		{name: "non-numeric start", line: statLine("x", "1", "soon"), wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ppid, start, err := parseStat([]byte(tc.line))
			if tc.wantErr {
				if err == nil {
					t.Fatalf("parseStat(%q) = (%d, %d, nil), want an error", tc.line, ppid, start)
				}
				if tc.wantBad && !errors.Is(err, errBadStat) {
					t.Errorf("parseStat(%q) error %v, want errBadStat", tc.line, err)
				}
				return
			}
			if err != nil || ppid != tc.wantPPID || start != tc.wantStart {
				t.Errorf("parseStat(%q) = (%d, %d, %v), want (%d, %d, nil)", tc.line, ppid, start, err, tc.wantPPID, tc.wantStart)
			}
		})
	}
}

func TestParseProcCgroup(t *testing.T) {
	const ctrPath = "/kubepods/burstable/pod" + fxPodUID + "/" + fxCtrID
	tests := []struct {
		name     string
		file     string
		wantPath string
		wantCID  string
		wantPod  string
	}{
		{
			name: "hybrid v1 and v2, runc container",
			file: "9:name=systemd:" + ctrPath + "\n" +
				"4:memory:" + ctrPath + "\n" +
				"0::" + ctrPath + "\n",
			wantPath: ctrPath, wantCID: fxCtrID, wantPod: fxPodUID,
		},
		{
			name: "hybrid, only the unified line names the container",
			file: "12:cpu,cpuacct:/\n" +
				"1:name=systemd:/init.scope\n" +
				"0::" + ctrPath + "\n",
			wantPath: ctrPath, wantCID: fxCtrID, wantPod: fxPodUID,
		},
		{
			name:     "pure v2 container",
			file:     "0::" + ctrPath + "\n",
			wantPath: ctrPath, wantCID: fxCtrID, wantPod: fxPodUID,
		},
		{
			name:     "pure v2 systemd driver",
			file:     "0::/kubepods.slice/kubepods-pod" + strings.ReplaceAll(fxPodUID, "-", "_") + ".slice/cri-containerd-" + fxCtrID + ".scope\n",
			wantPath: "/kubepods.slice/kubepods-pod" + strings.ReplaceAll(fxPodUID, "-", "_") + ".slice/cri-containerd-" + fxCtrID + ".scope",
			wantCID:  fxCtrID, wantPod: fxPodUID,
		},
		{
			name:     "pure v2 without trailing newline",
			file:     "0::" + ctrPath,
			wantPath: ctrPath, wantCID: fxCtrID, wantPod: fxPodUID,
		},
		{
			name:     "pure v2 host",
			file:     "0::/user.slice/user-1000.slice/session-3.scope\n",
			wantPath: "/user.slice/user-1000.slice/session-3.scope",
		},
		{
			name: "hybrid host",
			file: "12:memory:/user.slice/user-1000.slice/session-3.scope\n" +
				"1:name=systemd:/user.slice/user-1000.slice/session-3.scope\n" +
				"0::/user.slice/user-1000.slice/session-3.scope\n",
			wantPath: "/user.slice/user-1000.slice/session-3.scope",
		},
		{
			name:     "cgroup namespace root",
			file:     "0::/\n",
			wantPath: "/",
		},
		{
			name: "v1 only host: no unified path",
			file: "4:memory:/user.slice\n1:name=systemd:/user.slice\n",
		},
		{
			name: "empty",
			file: "",
		},
		{
			name: "garbage lines",
			file: "nonsense\n\n::\n",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path, cid, pod := parseProcCgroup([]byte(tc.file))
			if path != tc.wantPath || cid != tc.wantCID || pod != tc.wantPod {
				t.Errorf("parseProcCgroup(%q)\n = (%q, %q, %q)\nwant (%q, %q, %q)", tc.file, path, cid, pod, tc.wantPath, tc.wantCID, tc.wantPod)
			}
		})
	}
}
