package main

// How the plugin names itself and finds its cluster, as krew's plugin
// conventions ask: help and usage say `kubectl correlator ...` when
// kubectl runs it (`correlator kubectl ...` as correlator's subcommand),
// and a missing kubeconfig says where the plugin looked and what to do.

import (
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
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
)

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
