//go:build e2ecluster

package kubeapi

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/execid/correlator/internal/ociimage"
	"github.com/execid/correlator/internal/testutil"
	"github.com/execid/correlator/pkg/cluster"
)

// debugSession is bob's `kubectl debug`: an ephemeral container the
// kubelet starts in web-0 with the bridge's ID in its env. Its first
// process is the runtime's, not an exec into the pod: the join ties it to
// the pods/ephemeralcontainers request that names the container.
func (c *realCluster) debugSession(t *testing.T, resp pluginAs) {
	t.Helper()
	c.kubectl(t, bob, "shop").must(t, "debug", "web-0", "--image="+ociimage.BusyboxRef, "--image-pull-policy=Never",
		"--container=dbg", "--", "sh", "-c", "/bin/cat /proc/uptime >/dev/null; sleep 1")
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("processes in web-0 as the agent holds them:\n%s", c.agent.get(t, "/api/v1/processes?pod=web-0&limit=200"))
		}
	})
	var id string
	testutil.EventuallyNil(t, func() error {
		got := decode[cluster.Session](t, resp.quiet(t, "sessions", "--user", bob.name, "--container", "dbg", "-o", "json"))
		for _, s := range got.Items {
			if s.ProcessCount > 0 {
				id = s.AuditID
				return nil
			}
		}
		return fmt.Errorf("no debug session of bob's with processes yet: %+v", got.Items)
	})
	checkExactIn(t, resp, id, bob.name, "dbg", "/bin/cat /proc/uptime")
	saveOutput(t, "cluster-debug.txt", resp.must(t, "session", id))
}

// get reads path from the agent's API with its token.
func (a *chartAgent) get(t *testing.T, path string) string {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, fmt.Sprintf("https://127.0.0.1:%d%s", a.port, path), nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+a.token)
	r, err := a.client.Do(req)
	if err != nil {
		return fmt.Sprintf("(reading %s: %v)", path, err)
	}
	defer r.Body.Close()
	b, _ := io.ReadAll(r.Body)
	return r.Status + "\n" + string(b)
}

// postWebhook posts an empty audit batch to the agent's webhook with
// token, as kube-apiserver's webhook backend does, and returns the status.
func (a *chartAgent) postWebhook(t *testing.T, token string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, a.webhookURL("127.0.0.1"),
		strings.NewReader(`{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[]}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	r, err := a.client.Do(req)
	if err != nil {
		t.Fatalf("posting to the agent's webhook: %v", err)
	}
	r.Body.Close()
	return r.StatusCode
}
