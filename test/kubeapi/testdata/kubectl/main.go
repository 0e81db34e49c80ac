// Command kubectl is k8s.io/kubectl at the version this module pins, as
// k8s.io/kubernetes/cmd/kubectl builds it: what `make deps` installs when
// the kubectl on PATH is missing or older than 1.30 (the tests need its
// WebSocket exec; Debian's kubernetes-client is 1.20).
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/component-base/logs"
	"k8s.io/kubectl/pkg/cmd"
	"k8s.io/kubectl/pkg/cmd/util"

	// The client auth plugins, as kubectl initialises them.
	_ "k8s.io/client-go/plugin/pkg/client/auth"
)

func main() {
	logs.GlogSetter(cmd.GetLogVerbosity(os.Args)) //nolint:errcheck
	command := cmd.NewDefaultKubectlCommand()
	if err := cli.RunNoErrOutput(command); err != nil {
		util.CheckErr(err)
	}
}
