// Command correlator answers "which Kubernetes user ran this command in my pod?".
// main.go only wires subcommands; each lives in its own file.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/execid/correlator/pkg/cluster"
)

// version is set at link time: -ldflags "-X main.version=v1.2.3".
var version = "dev"

// globalOptions are the flags shared by every subcommand.
type globalOptions struct {
	logLevel string
}

// logger builds the root logger; subcommands derive component sub-loggers from it.
func (g *globalOptions) logger() zerolog.Logger { return newLogger(os.Stderr, g.logLevel) }

// newLogger is the root logger writing to w at level (info when it does
// not parse).
func newLogger(w io.Writer, level string) zerolog.Logger {
	lvl, err := zerolog.ParseLevel(level)
	if err != nil {
		lvl = zerolog.InfoLevel
	}
	return zerolog.New(w).Level(lvl).Hook(millis{})
}

// millis stamps each entry with its time to the millisecond, where
// zerolog's Timestamp gives whole seconds: a retention pass or a stall
// lines up with the requests around it. RFC 3339 still reads it.
type millis struct{}

func (millis) Run(e *zerolog.Event, _ zerolog.Level, _ string) {
	e.Str(zerolog.TimestampFieldName, time.Now().UTC().Format("2006-01-02T15:04:05.000Z07:00"))
}

func main() {
	root, name := newRootCmd(&globalOptions{}, os.Args[0], os.Args[1:], os.Getenv)
	err := root.Execute()
	switch {
	case errors.Is(err, cluster.ErrPartial):
		os.Exit(exitPartial) // the missing nodes are already on stderr
	case err != nil:
		// One line, so a log collector keeps it whole: joined errors (a
		// failed start and its cleanup's) come one per line.
		fmt.Fprintf(os.Stderr, "%s: %s\n", name, strings.ReplaceAll(err.Error(), "\n", "; "))
		os.Exit(1)
	}
}

// newRootCmd is correlator's command tree, or the kubectl plugin's when
// the binary runs as `kubectl correlator` (asPlugin); name prefixes its
// errors.
func newRootCmd(g *globalOptions, argv0 string, args []string, getenv func(string) string) (*cobra.Command, string) {
	if plugin, pargs := asPlugin(argv0, args, getenv); plugin {
		root := newKubectlCmd(true)
		root.SetArgs(pargs)
		return root, pluginDisplay
	}
	root := &cobra.Command{
		Use:           "correlator",
		Short:         "Attribute commands run in Kubernetes pods to the users who ran them",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().StringVar(&g.logLevel, "log-level", "info", "log level (debug, info, warn, error)")
	root.AddCommand(newCaptureCmd(g), newAuditCmd(g), newSessionsCmd(), newSessionCmd(), newProcessesCmd(), newRunCmd(g),
		newKubectlCmd(false), newBridgeCmd(g), newUninstallCmd(g))
	root.SetArgs(args)
	return root, "correlator"
}
