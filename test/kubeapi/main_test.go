package kubeapi

import (
	"io"
	"os"
	"testing"

	"k8s.io/klog/v2"
)

// TestMain keeps kube-apiserver's and etcd's logs (thousands of lines)
// out of the test output; CORRELATOR_KUBEAPI_KLOG=1 keeps them.
func TestMain(m *testing.M) {
	if os.Getenv("CORRELATOR_KUBEAPI_KLOG") == "" {
		klog.LogToStderr(false)
		klog.SetOutput(io.Discard)
	}
	code := m.Run()
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
	os.Exit(code)
}
