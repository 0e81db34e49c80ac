package nodeharness

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/execid/correlator/internal/testutil"
	"github.com/execid/correlator/pkg/api"
	"github.com/execid/correlator/pkg/vocab"
)

// checkBridge: no KEP-6035 anywhere. Two users' overlapping `kubectl exec`
// sessions into one container, as the exec bridge rewrote them (`env
// CORRELATOR_EXEC_ID=<fresh id> <command>`), run through the CRI's
// streaming Exec, the kubelet's path; their audit records keep the users'
// own commands and carry the bridge's annotation. The agent the chart
// installed with bridge.enabled attributes each exactly (audit_id), where
// the same two sessions without the bridge are the heuristic's to guess.
func checkBridge(t *testing.T, n *Node, client *api.Client, agent *AgentPod, ctr string, p podSpec) {
	if !strings.Contains(agent.Config, vocab.BridgeKey) {
		t.Fatalf("the chart with bridge.enabled gave the agent no %s key:\n%s", vocab.BridgeKey, agent.Config)
	}
	now := time.Now()
	type session struct {
		req            testutil.ExecRequest
		bridge, marker string
	}
	var sessions []session
	for _, user := range []string{"frank", "grace"} {
		marker := "bridge-" + user + "-" + testutil.RandomUUID()[:8]
		cmd := []string{"/bin/sh", "-c", "/bin/sleep 2; /bin/echo " + marker + "; exit 0"}
		b := testutil.RandomUUID()
		sessions = append(sessions, session{
			req: testutil.ExecRequest{AuditID: testutil.RandomUUID(), User: user, Groups: []string{"dev"},
				Namespace: p.namespace, Pod: p.name, Container: "app", Command: cmd, Received: now, Duration: 5 * time.Second,
				Annotations: map[string]string{vocab.BridgeWebhookName + "/" + vocab.BridgeKey: b}},
			bridge: b, marker: marker})
	}
	var wg sync.WaitGroup
	errs := make([]error, len(sessions))
	for i, s := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := append([]string{"env", vocab.BridgeKey + "=" + s.bridge}, s.req.Command...)
			stdout, stderr, err := n.CRIStreamExec(ctr, cmd)
			if err == nil && !strings.Contains(stdout, s.marker) {
				err = fmt.Errorf("stdout %q, stderr %q", stdout, stderr)
			}
			errs[i] = err
		}()
	}
	for _, s := range sessions {
		appendAuditLog(t, agent.AuditLog, s.req.LogLines())
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("bridged exec of %s: %v", sessions[i].req.User, err)
		}
	}
	for _, s := range sessions {
		root := waitAttributed(t, client, p.name, s.marker)
		if root.Attribution != vocab.AttributionAuditID || root.AuditID != s.req.AuditID {
			t.Errorf("%s's bridged root: %q %s (candidates %v, flags %v), want audit_id %s",
				s.req.User, root.Attribution, root.AuditID, root.Candidates, root.Flags, s.req.AuditID)
		}
	}
}
