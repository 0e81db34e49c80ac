package bridge

import (
	"net/http"
	"testing"
)

// TestRewritable: the rule alone. TestArgvFaithfulHost and
// TestArgvFaithfulContainer run it against real envs.
func TestRewritable(t *testing.T) {
	for _, c := range []struct {
		cmd  []string
		want bool
	}{
		{[]string{"sh"}, true},
		{[]string{"/bin/sh", "-c", "a=b; echo $a"}, true}, // only the first word counts
		{[]string{"env", "A=1", "sh"}, true},              // the caller's own env reads its own assignments
		{[]string{"--", "x"}, true},
		{[]string{"-i"}, true},
		{[]string{"-u", k}, true},
		{[]string{"-S", "sh -c id"}, true},
		{[]string{"--help"}, true},
		{[]string{"-iu"}, true},
		{[]string{""}, true}, // runs nothing either way
		{[]string{" "}, true},
		{[]string{"sh", "a=b"}, true},
		{[]string{"ü"}, true},
		{[]string{"/opt/a=b/run", "one", "two"}, false},
		{[]string{"a=b"}, false},
		{[]string{"=x"}, false},
		{[]string{"="}, false},
		{[]string{k + "=x", "sh"}, false},
		{[]string{"-"}, false}, // uutils' env reads it as -i
		{[]string{"-", "sh"}, false},
		{nil, false},
		{[]string{}, false},
	} {
		if got := Rewritable(c.cmd); got != c.want {
			t.Errorf("Rewritable(%q) = %v, want %v", c.cmd, got, c.want)
		}
	}
}

// TestDecideUnrewritable: such an exec passes unchanged, without an ID
// or a pod lookup, counted under its own skip reason.
func TestDecideUnrewritable(t *testing.T) {
	for _, cmd := range [][]string{{"/opt/a=b/run", "one", "two"}, {k + "=x", "sh"}, {"-", "sh"}} {
		pods := &fakePods{}
		d := testMutator(t, pods).Decide(t.Context(), execRequest(t, "app", cmd...))
		if d.Kind != KindExec || d.Skip != SkipUnrewritable || d.Patch != nil || d.ID != "" || d.Error != "" || d.CallerKey != nil {
			t.Errorf("%q: decision %+v", cmd, d)
		}
		if pods.calls != 0 {
			t.Errorf("%q: %d pod lookups", cmd, pods.calls)
		}
	}

	ts := startServer(t, nil)
	code, out := ts.post(t, review(t, execRequest(t, "app", "/opt/a=b/run", "one", "two")))
	if code != http.StatusOK || out.Response == nil || !out.Response.Allowed || out.Response.Patch != nil || out.Response.AuditAnnotations != nil {
		t.Fatalf("HTTP %d %+v", code, out)
	}
	fams := ts.metrics(t)
	for _, c := range []struct {
		name, label, val string
		want             float64
	}{
		{"correlator_bridge_requests_total", "kind", "exec", 1},
		{"correlator_bridge_mutations_total", "kind", "exec", 0},
		{"correlator_bridge_skips_total", "reason", SkipUnrewritable, 1},
	} {
		if got := value(fams, c.name, c.label, c.val); got != c.want {
			t.Errorf("%s{%s=%q} = %v, want %v", c.name, c.label, c.val, got, c.want)
		}
	}
}
