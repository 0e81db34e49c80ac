package cluster

import (
	"strings"
	"testing"
)

// TestNoKubeconfigMessage: each place the plugin looks, as it is
// named.
func TestNoKubeconfigMessage(t *testing.T) {
	env := func(kv ...string) func(string) string {
		return func(k string) string {
			for i := 0; i+1 < len(kv); i += 2 {
				if kv[i] == k {
					return kv[i+1]
				}
			}
			return ""
		}
	}
	exists := func(paths ...string) func(string) bool {
		return func(p string) bool { return strings.Contains(strings.Join(paths, "\n"), p) }
	}
	inPod := env("KUBERNETES_SERVICE_HOST", "10.0.0.1", "KUBERNETES_SERVICE_PORT", "443")
	for _, c := range []struct {
		name, explicit string
		precedence     []string
		getenv         func(string) string
		exists         func(string) bool
		want           string
	}{
		{"home", "", []string{"/h/.kube/config"}, env(), exists(),
			"looked at /h/.kube/config (not found); in-cluster config (not in a pod: "},
		{"flag", "/k.yaml", []string{"/h/.kube/config"}, env(), exists("/k.yaml"),
			"looked at --kubeconfig /k.yaml (no usable context); "},
		{"env", "", []string{"/a", "/b"}, env("KUBECONFIG", "/a:/b"), exists("/b"),
			"looked at KUBECONFIG=/a:/b: /a (not found), /b (no usable context); "},
		{"pod without token", "", []string{"/h/.kube/config"}, inPod, exists(),
			"; in-cluster config (no service account token at " + serviceAccountToken + "); point --kubeconfig"},
	} {
		got := noKubeconfig(c.explicit, c.precedence, c.getenv, c.exists)
		if !strings.Contains(got, c.want) {
			t.Errorf("%s: %q lacks %q", c.name, got, c.want)
		}
	}
}
