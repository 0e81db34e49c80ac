// Command kubelet is the kubelet of k8s.io/kubernetes at the version this
// module pins, built by TestRealCluster (go build, CGO off) so that the
// node it registers runs the same release as the in-process apiserver.
package main

import (
	"context"
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kubelet/app"
)

func main() {
	os.Exit(cli.Run(app.NewKubeletCommand(context.Background())))
}
