package testutil

import (
	"os/exec"
	"testing"
)

// Kubectl finds kubectl on PATH. Missing, the test skips, except under
// CI=true, where it fails with how to install it.
func Kubectl(t testing.TB) string {
	t.Helper()
	p, err := exec.LookPath("kubectl")
	if err == nil {
		return p
	}
	const reason = "kubectl not on PATH: install it (https://kubernetes.io/docs/tasks/tools/; " +
		"Debian: apt-get install kubernetes-client)"
	if InCI() {
		t.Fatalf("%s; under CI=true a skip is a failure", reason)
	}
	t.Skip(reason)
	return ""
}
