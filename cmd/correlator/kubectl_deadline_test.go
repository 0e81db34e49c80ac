package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/execid/correlator/pkg/cluster"
	"github.com/execid/correlator/pkg/cluster/clustertest"
)

// testPartialAtDeadline runs kubectl-correlator against a stand-in
// kube-apiserver of 200 agents, 10 of which accept the request and never
// answer: when --deadline passes it prints the answering nodes'
// sessions, names the hanging nodes as asked and not answered, and exits
// 3. Which nodes answered by the deadline is the machine's business: the
// test checks that every node either answered all its sessions or is
// named, and that the hanging ones are named (pkg/cluster's
// TestFanOutDeadline, deciding when the deadline passes, checks that
// exactly they are).
func testPartialAtDeadline(t *testing.T, dir string) {
	f := clustertest.Start(t, clustertest.Options{Nodes: 200, Hanging: 10, Sessions: 2})
	cmd := exec.CommandContext(t.Context(), filepath.Join(dir, "kubectl-correlator"), "sessions", "-A", "-o", "json",
		"--limit", "1000", "--node-timeout", "1h", "--deadline", "4s", "--kubeconfig", f.Kubeconfig(t))
	cmd.Env = bareEnv(t, dir)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != exitPartial {
		t.Fatalf("want exit %d, got %v:\n%s", exitPartial, err, stderr.String())
	}
	var ans cluster.Answer[cluster.Session]
	if err := json.Unmarshal(stdout.Bytes(), &ans); err != nil {
		t.Fatalf("decoding the answer: %v\n%s", err, stdout.String())
	}
	named := map[string]cluster.Failure{}
	for _, u := range ans.Unreachable {
		named[u.Node] = u
	}
	rows := map[string]bool{}
	for _, s := range ans.Items {
		rows[s.AuditID] = true
	}
	if !ans.Partial || ans.Nodes != 200 {
		t.Errorf("partial %v, nodes %d: want partial of 200", ans.Partial, ans.Nodes)
	}
	for _, n := range f.Hanging {
		if u, ok := named[n]; !ok || u.Left != cluster.LeftUnanswered {
			t.Errorf("hanging %s: named %v as %+v, want left unanswered", n, ok, u)
		}
		if !strings.Contains(stderr.String(), "  "+n+": asked, no answer yet") {
			t.Errorf("stderr does not name %s as not answered yet:\n%s", n, stderr.String())
		}
	}
	for _, n := range f.Answering {
		ids := f.SessionIDs([]string{n})
		_, isNamed := named[n]
		if has := slices.IndexFunc(ids, func(id string) bool { return !rows[id] }) < 0; has == isNamed {
			t.Errorf("%s: all its rows %v, named %v: want exactly one", n, has, isNamed)
		}
	}
	if !strings.Contains(stderr.String(), "--deadline 4s passed before ") {
		t.Errorf("stderr does not say the deadline passed:\n%s", stderr.String())
	}
}
