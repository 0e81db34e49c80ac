package main

// How the plugin names itself and finds its cluster, as krew's plugin
// conventions ask: help and usage say `kubectl correlator ...` when
// kubectl runs it (`correlator kubectl ...` as correlator's subcommand),
// and a missing kubeconfig says where the plugin looked and what to do.

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	// Auth providers a kubeconfig may name (oidc; gcp and azure answer
	// with the exec plugin to use instead), as krew asks of Go plugins.
	_ "k8s.io/client-go/plugin/pkg/client/auth"
	"k8s.io/client-go/tools/clientcmd"
)

const (
	// pluginDisplay is the plugin's name in help and usage when kubectl
	// runs it.
	pluginDisplay = "kubectl correlator"
	// subcommandDisplay is the same commands' name under correlator.
	subcommandDisplay = "correlator kubectl"
	// pluginCallerEnv names the kubectl that ran a plugin. kubectl's
	// plugin mechanism of 1.8 to 1.11 set it; current kubectl runs
	// plugins by name (argv[0] is the kubectl-correlator it found), but a
	// wrapper that runs `correlator kubectl` for kubectl may set it.
	pluginCallerEnv = "KUBECTL_PLUGINS_CALLER"
	// serviceAccountToken is the pod's service account token, which
	// in-cluster configuration reads (rest.InClusterConfig).
	serviceAccountToken = "/var/run/secrets/kubernetes.io/serviceaccount/token"
)

// errNoKubeconfig is client-go's empty configuration ("try setting
// KUBERNETES_MASTER"), said plainly: no kubeconfig and no pod.
var errNoKubeconfig = errors.New("no kubeconfig found and not in a pod")

// isPluginName reports whether the binary runs as the kubectl plugin.
func isPluginName(base string) bool {
	return base == "kubectl-correlator" || base == "kubectl_correlator"
}

// asPlugin reports whether the binary runs as `kubectl correlator`, and
// the plugin's own arguments: named kubectl-correlator (as kubectl and
// krew run it), or `correlator kubectl ...` run for kubectl (with
// KUBECTL_PLUGINS_CALLER set).
func asPlugin(argv0 string, args []string, getenv func(string) string) (bool, []string) {
	if isPluginName(filepath.Base(argv0)) {
		return true, args
	}
	if getenv(pluginCallerEnv) != "" && len(args) > 0 && args[0] == "kubectl" {
		return true, args[1:]
	}
	return false, args
}

// nameCommands makes every usage, help and example line name the
// commands as they were run. As the plugin, the root's Use is the
// binary's name and cobra's display name annotation is `kubectl
// correlator` (a Use of "kubectl correlator" would make the root's name
// "kubectl"); under correlator, the root is the `kubectl` subcommand.
func nameCommands(root *cobra.Command, plugin bool) {
	display := subcommandDisplay
	if plugin {
		root.Use = "kubectl-correlator"
		if root.Annotations == nil {
			root.Annotations = map[string]string{}
		}
		root.Annotations[cobra.CommandDisplayNameAnnotation] = pluginDisplay
		display = pluginDisplay
	}
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		c.Example = strings.ReplaceAll(c.Example, pluginDisplay+" ", display+" ")
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

// kubeconfigError wraps an error of loading the kubeconfig; client-go's
// empty configuration becomes errNoKubeconfig with where the plugin
// looked and what to do.
func (o *kubectlOptions) kubeconfigError(what string, err error) error {
	if !clientcmd.IsEmptyConfig(err) {
		return fmt.Errorf("%s: %w", what, err)
	}
	return fmt.Errorf("%s: %w: %s", what, errNoKubeconfig,
		noKubeconfig(o.loading.ExplicitPath, o.loading.GetLoadingPrecedence(), os.Getenv, fileExists))
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
