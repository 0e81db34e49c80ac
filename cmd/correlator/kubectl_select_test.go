package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/execid/correlator/pkg/cluster"
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
		{[]string{"alerts", "-l", "app=web", "--elasticsearch", "http://127.0.0.1:1"}, cluster.ErrSelectorES.Error()},
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
		if strings.Contains(tc.want, "elasticsearch") && !errors.Is(err, cluster.ErrSelectorES) {
			t.Errorf("%v: want cluster.ErrSelectorES, got %v", tc.args, err)
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
