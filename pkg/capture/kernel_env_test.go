package capture

import (
	"strings"
	"testing"

	"github.com/execid/correlator/internal/testutil"
	"github.com/execid/correlator/pkg/vocab"
)

// TestKernelKeyPosition runs real execs against the loaded probe and checks
// the scan finds exactly the key getenv would, wherever it sits.
func TestKernelKeyPosition(t *testing.T) {
	h := newHarness(t, allScope) // host execs without a key too
	id := testutil.RandomUUID()
	big := bigEnv(200 << 10)
	cases := []struct {
		name    string
		env     []string
		want    string
		flags   []string
		noFlags []string
	}{
		{name: "first", env: append([]string{keyEnv(id)}, baseEnv()...), want: id},
		{name: "middle", env: []string{"A=1", "B=2", keyEnv(id), "C=3", "D=4"}, want: id},
		{name: "last", env: append(baseEnv(), keyEnv(id)), want: id},
		{name: "behind 200KiB of variables", env: append(append(baseEnv(), big...), keyEnv(id)), want: id,
			noFlags: []string{vocab.FlagScanTruncated}},
		// 131,072 variables: the scan's every block and span, bpf_loop's or
		// the compat object's global functions (object.go), is walked.
		{name: "behind 256KiB of one-byte variables", env: append(tinyEnv(256<<10), keyEnv(id)), want: id,
			noFlags: []string{vocab.FlagScanTruncated}},
		{name: "behind one 120KiB value", env: []string{"BLOB=" + strings.Repeat("x", 120<<10), keyEnv(id)}, want: id},
		{name: "multi-line value hiding a fake key", want: id,
			env: []string{"MULTI=line1\n" + keyEnv("fake") + "\nline3", keyEnv(id)}},
		{name: "multi-line fake only", want: "",
			env: []string{"MULTI=line1\n" + keyEnv("fake"), "PATH=/bin"}},
		{name: "relaxed names", want: id,
			env: []string{"Logging:LogLevel:Default=x", "a.b-c d=y", "=weird", keyEnv(id)}},
		{name: "longer key is not the key", want: "", env: []string{keyName + "_OLD=" + id, "X" + keyName + "=" + id}},
		{name: "literal $(FOO)", want: "$(FOO)", env: []string{"FOO=bar", keyEnv("$(FOO)")},
			flags: []string{vocab.FlagNonstandardID}},
		{name: "duplicate: first wins", want: id, env: []string{keyEnv(id), "A=1", keyEnv(testutil.RandomUUID())},
			flags: []string{vocab.FlagDuplicateKey}},
		{name: "placeholder", want: "unknown", env: []string{keyEnv("unknown")}, flags: []string{vocab.FlagPlaceholder}},
		{name: "empty value", want: "", env: []string{keyEnv("")}},
		{name: "long value truncated", want: strings.Repeat("z", 128), env: []string{keyEnv(strings.Repeat("z", 300))},
			flags: []string{vocab.FlagNonstandardID, vocab.FlagIDTruncated}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pid := run(t, []string{"/bin/true"}, tc.env)
			ev := h.waitFor("exec of /bin/true", execOf(pid))
			if ev.AuditID != tc.want {
				t.Errorf("auditID = %q, want %q", ev.AuditID, tc.want)
			}
			if tc.want != "" && ev.Source != vocab.SourceEnv {
				t.Errorf("source = %q, want env", ev.Source)
			}
			wantFlags(t, ev, tc.flags...)
			noFlags(t, ev, tc.noFlags...)
			noFlags(t, ev, vocab.FlagScanError, vocab.FlagEnvMismatch, vocab.FlagEnvRemoved)
		})
	}
}

// TestKernelScanBudget checks that a key beyond the budget is reported as
// possibly missed rather than silently absent.
func TestKernelScanBudget(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.ScanBudget = 8 << 10 })
	id := testutil.RandomUUID()
	pid := run(t, []string{"/bin/true"}, append(bigEnv(64<<10), keyEnv(id)))
	ev := h.waitFor("exec behind the budget", execOf(pid))
	if ev.AuditID != "" {
		t.Errorf("auditID = %q beyond an 8 KiB budget", ev.AuditID)
	}
	wantFlags(t, ev, vocab.FlagScanTruncated)

	pid = run(t, []string{"/bin/true"}, append([]string{keyEnv(id)}, bigEnv(64<<10)...))
	ev = h.waitFor("exec with the key first", execOf(pid))
	if ev.AuditID != id {
		t.Errorf("auditID = %q, want %q", ev.AuditID, id)
	}
	s, err := h.p.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if s.ScanTruncated == 0 {
		t.Error("scan_truncated counter stayed 0")
	}
}

// TestKernelSecondKey checks SPO_EXEC_REQUEST_UID is captured alongside.
func TestKernelSecondKey(t *testing.T) {
	h := newHarness(t, nil)
	id, spo := testutil.RandomUUID(), testutil.RandomUUID()
	pid := run(t, []string{"/bin/sh", "-c", "/bin/true; true"}, []string{"SPO_EXEC_REQUEST_UID=" + spo, keyEnv(id), "PATH=/bin"})
	ev := h.waitFor("exec with both keys", execOf(pid))
	if ev.AuditID != id || ev.Keys["SPO_EXEC_REQUEST_UID"].Value != spo {
		t.Errorf("auditID %q keys %+v, want %s and %s", ev.AuditID, ev.Keys, id, spo)
	}
	child := h.waitFor("child exec", func(e Event) bool { return e.Kind == KindExec && e.PPID == uint32(pid) })
	if kv := child.Keys["SPO_EXEC_REQUEST_UID"]; kv.Value != spo || kv.Source != vocab.SourceInherited {
		t.Errorf("child SPO key %+v, want %s inherited", kv, spo)
	}
}

// tinyEnv is n bytes of one-letter variables ("x" and its NUL).
func tinyEnv(n int) []string {
	env := make([]string, n/2)
	for i := range env {
		env[i] = "x"
	}
	return env
}
