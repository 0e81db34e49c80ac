package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/execid/correlator/pkg/auditlog"
	"github.com/execid/correlator/pkg/cluster"
	"github.com/execid/correlator/pkg/join"
)

func TestKubectlSelectorFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"who", "web-0", "-l", "app=web"}, "give a POD or -l SELECTOR, not both"},
		{[]string{"who"}, "give a POD or -l SELECTOR"},
		{[]string{"sessions", "-A", "-l", "app in (web"}, `parsing label selector "app in (web"`},
		{[]string{"who", "--selector", "=web"}, "parsing label selector"},
		{[]string{"alerts", "-l", "app=web", "--elasticsearch", "http://127.0.0.1:1"}, errSelectorES.Error()},
	} {
		cmd := newKubectlCmd(true)
		var out, errb bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(&errb)
		cmd.SetArgs(append(tc.args, "--kubeconfig", "/nonexistent"))
		err := cmd.Execute()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: got %v, want %q", tc.args, err, tc.want)
		}
		if strings.Contains(tc.want, "elasticsearch") && !errors.Is(err, errSelectorES) {
			t.Errorf("%v: want errSelectorES, got %v", tc.args, err)
		}
	}
	// Every listing command takes -l.
	for _, name := range []string{"who", "sessions", "alerts"} {
		c, _, err := newKubectlCmd(true).Find([]string{name})
		if err != nil || c.Flags().ShorthandLookup("l") == nil || !strings.Contains(c.Flags().Lookup("selector").Usage, "no longer exist") {
			t.Errorf("%s: want -l/--selector saying deleted pods never match (%v)", name, err)
		}
	}
}

func TestKubectlRenderWhoIn(t *testing.T) {
	a := cluster.WhoInAnswer{Selection: cluster.Selection{Selector: "app=web", Namespace: "shop",
		Pods: []cluster.PodRef{{Namespace: "shop", Name: "web-0", Node: "node-a"}, {Namespace: "shop", Name: "web-9"}}}}
	a.Items = []cluster.Session{{Nodes: []string{"node-a"}, Session: join.Session{ExecRecord: auditlog.ExecRecord{
		AuditID: "id-1", Namespace: "shop", Pod: "web-0", Container: "app", Code: 101,
		User: auditlog.UserInfo{Username: "alice"}, Command: []string{"sh"}}}}}
	var b bytes.Buffer
	if err := renderWhoIn(&b, a, false); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"Pods in namespace shop matching app=web: 2", "NAMESPACE/POD", "shop/web-0", "node-a", "alice", "id-1"} {
		if !strings.Contains(b.String(), s) {
			t.Errorf("want %q in:\n%s", s, b.String())
		}
	}
	b.Reset()
	a.Items = nil
	if err := renderWhoIn(&b, a, false); err != nil || !strings.Contains(b.String(), "No exec sessions recorded.") {
		t.Errorf("no sessions: %v\n%s", err, b.String())
	}
}
