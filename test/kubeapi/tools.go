//go:build tools

package kubeapi

// The kubelet that TestRealCluster (make e2e-cluster) builds from
// testdata/kubelet, and the kubectl `make deps` builds from testdata/kubectl
// when the one on PATH is too old: imported here so that go.mod keeps their
// modules (go mod tidy skips testdata), and never compiled, so `go test
// ./...` builds neither.
import (
	_ "k8s.io/client-go/plugin/pkg/client/auth"
	_ "k8s.io/kubectl/pkg/cmd"
	_ "k8s.io/kubernetes/cmd/kubelet/app"
)
