// Command correlator answers "which Kubernetes user ran this command in my pod?".
// main.go only wires subcommands; each lives in its own file.
package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"
)

// version is set at link time: -ldflags "-X main.version=v1.2.3".
var version = "dev"

// globalOptions are the flags shared by every subcommand.
type globalOptions struct {
	logLevel string
}

// logger builds the root logger; subcommands derive component sub-loggers from it.
func (g *globalOptions) logger() zerolog.Logger {
	lvl, err := zerolog.ParseLevel(g.logLevel)
	if err != nil {
		lvl = zerolog.InfoLevel
	}
	return zerolog.New(os.Stderr).Level(lvl).With().Timestamp().Logger()
}

func main() {
	g := &globalOptions{}
	root := &cobra.Command{
		Use:           "correlator",
		Short:         "Attribute commands run in Kubernetes pods to the users who ran them",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().StringVar(&g.logLevel, "log-level", "info", "log level (debug, info, warn, error)")
	root.AddCommand(newCaptureCmd(g), newAuditCmd(g), newSessionsCmd(), newSessionCmd(), newProcessesCmd(), newRunCmd(g),
		newKubectlCmd("kubectl"), newBridgeCmd(g), newUninstallCmd(g))
	name := "correlator"
	// Installed as kubectl-correlator, the binary is the kubectl plugin.
	if isPluginName(filepath.Base(os.Args[0])) {
		root, name = newKubectlCmd("kubectl correlator"), "kubectl correlator"
	}
	err := root.Execute()
	switch {
	case errors.Is(err, errPartial):
		os.Exit(exitPartial) // the missing nodes are already on stderr
	case err != nil:
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		os.Exit(1)
	}
}
