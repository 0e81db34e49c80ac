package cluster

import (
	"errors"
	"fmt"
	"os"
	"strings"

	// Auth providers a kubeconfig may name (oidc; gcp and azure answer
	// with the exec plugin to use instead), as krew asks of Go plugins.
	_ "k8s.io/client-go/plugin/pkg/client/auth"
	"k8s.io/client-go/tools/clientcmd"
)

// serviceAccountToken is the pod's service account token, which
// in-cluster configuration reads (rest.InClusterConfig).
const serviceAccountToken = "/var/run/secrets/kubernetes.io/serviceaccount/token"

// ErrNoKubeconfig is client-go's empty configuration ("try setting
// KUBERNETES_MASTER"), said plainly: no kubeconfig and no pod.
var ErrNoKubeconfig = errors.New("no kubeconfig found and not in a pod")

// KubeconfigError wraps an error of loading the kubeconfig; client-go's
// empty configuration becomes ErrNoKubeconfig with where the loading
// rules looked and what to do.
func KubeconfigError(what string, err error, loading *clientcmd.ClientConfigLoadingRules) error {
	if !clientcmd.IsEmptyConfig(err) {
		return fmt.Errorf("%s: %w", what, err)
	}
	return fmt.Errorf("%s: %w: %s", what, ErrNoKubeconfig,
		noKubeconfig(loading.ExplicitPath, loading.GetLoadingPrecedence(), os.Getenv, fileExists))
}

// noKubeconfig says where the plugin looked for a cluster (the
// --kubeconfig file, $KUBECONFIG's files or ~/.kube/config, then the
// pod's service account) and what to do.
func noKubeconfig(explicit string, precedence []string, getenv func(string) string, exists func(string) bool) string {
	var where []string
	file := func(p string) string {
		if exists(p) {
			return p + " (no usable context)"
		}
		return p + " (not found)"
	}
	switch env := getenv(clientcmd.RecommendedConfigPathEnvVar); {
	case explicit != "":
		where = append(where, "--kubeconfig "+file(explicit))
	case env != "":
		files := make([]string, 0, len(precedence))
		for _, p := range precedence {
			files = append(files, file(p))
		}
		where = append(where, "KUBECONFIG="+env+": "+strings.Join(files, ", "))
	default:
		for _, p := range precedence {
			where = append(where, file(p))
		}
	}
	switch {
	case getenv("KUBERNETES_SERVICE_HOST") == "" || getenv("KUBERNETES_SERVICE_PORT") == "":
		where = append(where, "in-cluster config (not in a pod: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT unset)")
	case !exists(serviceAccountToken):
		where = append(where, "in-cluster config (no service account token at "+serviceAccountToken+")")
	default:
		where = append(where, "in-cluster config")
	}
	return "looked at " + strings.Join(where, "; ") +
		"; point --kubeconfig or KUBECONFIG at a kubeconfig file, or run inside a pod with a service account"
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
