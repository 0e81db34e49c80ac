package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/execid/correlator/internal/testutil"
)

// bareCommand names a command without the plugin's name, as in `kubectl
// who` or `kubectl [command]`.
var bareCommand = regexp.MustCompile(`\bkubectl (\[command\]|who|sessions|session|alerts|help|completion)\b`)

// usageLines are the lines that name a command to type: the line after
// each "Usage:", and cobra's `Use "... --help"` hint.
func usageLines(help string) []string {
	lines := strings.Split(help, "\n")
	var out []string
	for i, l := range lines {
		switch {
		case strings.TrimSpace(l) == "Usage:" && i+1 < len(lines):
			out = append(out, strings.TrimSpace(lines[i+1]))
		case strings.HasPrefix(l, `Use "`):
			out = append(out, strings.TrimPrefix(l, `Use "`))
		}
	}
	return out
}

// checkHelp checks that help names the commands as prog (`kubectl
// correlator` or `correlator kubectl`) on every usage line, and that
// wantIn appears.
func checkHelp(t *testing.T, what, help, prog string, wantIn ...string) {
	t.Helper()
	lines := usageLines(help)
	if len(lines) == 0 {
		t.Errorf("%s: no usage line:\n%s", what, help)
	}
	for _, l := range lines {
		if !strings.HasPrefix(l, prog+" ") {
			t.Errorf("%s: usage line %q does not start with %q", what, l, prog)
		}
	}
	if m := bareCommand.FindString(help); m != "" && prog == pluginDisplay {
		t.Errorf("%s: %q lacks the plugin's name:\n%s", what, m, help)
	}
	for _, w := range wantIn {
		if !strings.Contains(help, w) {
			t.Errorf("%s: help lacks %q:\n%s", what, w, help)
		}
	}
}

// pluginPath is a PATH directory holding kubectl-correlator, a link to
// the built binary, as `install` or krew would put it.
func pluginPath(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.Symlink(buildBinary(t), filepath.Join(dir, "kubectl-correlator")); err != nil {
		t.Fatalf("linking kubectl-correlator: %v", err)
	}
	return dir
}

// bareEnv is an environment with PATH and an empty HOME: no
// ~/.kube/config, no KUBECONFIG, not in a pod.
func bareEnv(t *testing.T, path string) []string {
	return []string{"PATH=" + path, "HOME=" + t.TempDir()}
}

// TestKubectlPluginBinary runs the built binary as kubectl-correlator
// (one build, ~20 s to link on 2 cores, for both subtests).
func TestKubectlPluginBinary(t *testing.T) {
	dir := pluginPath(t)
	t.Run("help under a real kubectl", func(t *testing.T) { testUnderRealKubectl(t, dir) })
	t.Run("no kubeconfig", func(t *testing.T) { testNoKubeconfig(t, dir) })
	t.Run("partial at the deadline", func(t *testing.T) { testPartialAtDeadline(t, dir) })
}

// testUnderRealKubectl: kubectl (from PATH) finds kubectl-correlator in
// dir on PATH and runs it; its help names the plugin on every usage line.
func testUnderRealKubectl(t *testing.T, dir string) {
	kubectl := testutil.Kubectl(t)
	env := bareEnv(t, dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	run := func(args ...string) string {
		cmd := exec.CommandContext(t.Context(), kubectl, args...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	checkHelp(t, "kubectl correlator --help", run("correlator", "--help"), pluginDisplay,
		"kubectl correlator [command]", `Use "kubectl correlator [command] --help"`)
	checkHelp(t, "kubectl correlator who --help", run("correlator", "who", "--help"), pluginDisplay,
		"kubectl correlator who (POD | -l SELECTOR)", "  kubectl correlator who web-0 -n prod")
	checkHelp(t, "kubectl correlator help sessions", run("correlator", "help", "sessions"), pluginDisplay,
		"kubectl correlator sessions [flags]")
}

// TestPluginNaming: the same commands, named as they were run.
func TestPluginNaming(t *testing.T) {
	caller := func(k string) string {
		if k == pluginCallerEnv {
			return "/usr/bin/kubectl"
		}
		return ""
	}
	none := func(string) string { return "" }
	for _, c := range []struct {
		name, argv0 string
		args        []string
		getenv      func(string) string
		prog        string
	}{
		{"as kubectl-correlator", "/home/u/.krew/bin/kubectl-correlator", []string{"who", "--help"}, none, pluginDisplay},
		{"as correlator kubectl", "/usr/local/bin/correlator", []string{"kubectl", "who", "--help"}, none, subcommandDisplay},
		{"run for kubectl", "/usr/local/bin/correlator", []string{"kubectl", "who", "--help"}, caller, pluginDisplay},
	} {
		t.Run(c.name, func(t *testing.T) {
			root, name := newRootCmd(&globalOptions{}, c.argv0, c.args, c.getenv)
			var out bytes.Buffer
			root.SetOut(&out)
			if err := root.Execute(); err != nil {
				t.Fatal(err)
			}
			checkHelp(t, c.name, out.String(), c.prog, c.prog+" who (POD | -l SELECTOR) [flags]", "  "+c.prog+" who web-0")
			if other := map[string]string{pluginDisplay: subcommandDisplay, subcommandDisplay: pluginDisplay}[c.prog]; strings.Contains(out.String(), other) {
				t.Errorf("help names %q:\n%s", other, out.String())
			}
			if want := map[string]string{pluginDisplay: pluginDisplay, subcommandDisplay: "correlator"}[c.prog]; name != want {
				t.Errorf("error prefix %q, want %q", name, want)
			}
		})
	}
}

// testNoKubeconfig: with no kubeconfig and not in a pod, the plugin says
// where it looked and what to do, not client-go's KUBERNETES_MASTER.
func testNoKubeconfig(t *testing.T, dir string) {
	for _, c := range []struct {
		name, kubeconfig string
		want             []string
	}{
		{"home", "", []string{"/.kube/config (not found)"}},
		{"KUBECONFIG", "/nonexistent/a:/nonexistent/b", []string{"KUBECONFIG=/nonexistent/a:/nonexistent/b", "/nonexistent/b (not found)"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			env := bareEnv(t, dir+string(os.PathListSeparator)+os.Getenv("PATH"))
			if c.kubeconfig != "" {
				env = append(env, "KUBECONFIG="+c.kubeconfig)
			}
			home := strings.TrimPrefix(env[1], "HOME=")
			cmd := exec.CommandContext(t.Context(), filepath.Join(dir, "kubectl-correlator"), "who", "web-0")
			cmd.Env = env
			out, err := cmd.CombinedOutput()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 1 {
				t.Fatalf("want exit 1, got %v:\n%s", err, out)
			}
			msg := string(out)
			want := append(c.want, "kubectl correlator: ", "no kubeconfig found and not in a pod",
				"in-cluster config (not in a pod", "point --kubeconfig or KUBECONFIG at a kubeconfig file",
				"run inside a pod with a service account")
			if c.kubeconfig == "" {
				want = append(want, "looked at "+filepath.Join(home, ".kube", "config"))
			}
			for _, w := range want {
				if !strings.Contains(msg, w) {
					t.Errorf("error lacks %q:\n%s", w, msg)
				}
			}
			if strings.Contains(msg, "KUBERNETES_MASTER") {
				t.Errorf("error names KUBERNETES_MASTER:\n%s", msg)
			}
		})
	}
}
