//go:build tools

package kubeapi

// The kubelet that TestRealCluster (make e2e-cluster) builds from
// testdata/kubelet: imported here so that go.mod keeps its modules (go mod
// tidy skips testdata), and never compiled, so `go test ./...` does not
// build the kubelet.
import _ "k8s.io/kubernetes/cmd/kubelet/app"
