package nodeharness

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/execid/correlator/internal/ociimage"
	"github.com/execid/correlator/internal/testutil"
	"github.com/execid/correlator/pkg/api"
	"github.com/execid/correlator/pkg/bridge"
	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/vocab"
)

// bridgedSession is one user's `kubectl exec` as the exec bridge mutated
// it: a fresh bridge ID, the command the runtime execs, and the audit
// record (the user's own command, the bridge's annotation).
type bridgedSession struct {
	req            testutil.ExecRequest
	bridge, marker string
	run            []string // what the runtime execs
}

func newBridgedSession(user string, p podSpec, now time.Time, cmd func(marker string) []string) bridgedSession {
	marker := "bridge-" + user + "-" + testutil.RandomUUID()[:8]
	b := testutil.RandomUUID()
	c := cmd(marker)
	return bridgedSession{
		req: testutil.ExecRequest{AuditID: testutil.RandomUUID(), User: user, Groups: []string{"dev"},
			Namespace: p.namespace, Pod: p.name, Container: "app", Command: c, Received: now, Duration: 5 * time.Second,
			Annotations: map[string]string{vocab.BridgeWebhookName + "/" + vocab.BridgeKey: b}},
		bridge: b, marker: marker, run: bridge.Rewrite(c, vocab.BridgeKey, b)}
}

// checkBridge: no KEP-6035 anywhere. Three users' overlapping `kubectl
// exec` sessions into one container, as the exec bridge rewrote them, run
// through the CRI's streaming Exec, the kubelet's path; their audit records
// keep the users' own commands and carry the bridge's annotation. The agent
// the chart installed with bridge.enabled attributes each exactly
// (audit_id), where the same sessions without the bridge are the
// heuristic's to guess. heidi's command forges frank's bridge ID with her
// own `env CORRELATOR_EXEC_ID=`: the bridge overwrote it, so her session is
// hers. Then an exec that bypassed admission (no bridge, no record)
// mimics the bridge with frank's ID: it is never frank's.
func checkBridge(t *testing.T, n *Node, client *api.Client, agent *AgentPod, ctr string, p podSpec) {
	if !strings.Contains(agent.Config, vocab.BridgeKey) {
		t.Fatalf("the chart with bridge.enabled gave the agent no %s key:\n%s", vocab.BridgeKey, agent.Config)
	}
	now := time.Now()
	plain := func(m string) []string { return []string{"/bin/sh", "-c", "/bin/sleep 2; /bin/echo " + m + "; exit 0"} }
	frank := newBridgedSession("frank", p, now, plain)
	grace := newBridgedSession("grace", p, now, plain)
	heidi := newBridgedSession("heidi", p, now, func(m string) []string {
		return append([]string{"env", vocab.BridgeKey + "=" + frank.bridge}, plain(m)...)
	})
	if slices.Contains(heidi.run, vocab.BridgeKey+"="+frank.bridge) {
		t.Fatalf("the bridge kept heidi's forged key: %q", heidi.run)
	}
	sessions := []bridgedSession{frank, grace, heidi}
	var wg sync.WaitGroup
	errs := make([]error, len(sessions))
	for i, s := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			stdout, stderr, err := n.CRIStreamExec(ctr, s.run)
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

	// nodes/proxy or a runtime exec on the node: no bridge, no record,
	// frank's ID copied into the bridge's argv form.
	m := "uncovered-" + testutil.RandomUUID()[:8]
	mimic := []string{"env", vocab.BridgeKey + "=" + frank.bridge, "/bin/sh", "-c", "/bin/echo " + m + "; exit 0"}
	if stdout, stderr, err := n.CRIStreamExec(ctr, mimic); err != nil || !strings.Contains(stdout, m) {
		t.Fatalf("uncovered exec: %v, stdout %q, stderr %q", err, stdout, stderr)
	}
	root := waitAttributed(t, client, p.name, m, vocab.FlagAuditIDReused)
	if root.Attribution.Counted() || root.AuditID != "" || root.ClaimedAuditID != frank.req.AuditID {
		t.Errorf("uncovered exec with frank's bridge ID: %q %q claimed %q flags %v; want unattributed, claiming %s, audit_id_reused",
			root.Attribution, root.AuditID, root.ClaimedAuditID, root.Flags, frank.req.AuditID)
	}
	// Neither the mimic nor heidi's session is ever frank's; frank's own
	// command is (the control).
	for marker, want := range map[string]bool{m: false, heidi.marker: false, frank.marker: true} {
		page, err := client.Processes(context.Background(), url.Values{"user": {"frank"}, "command": {marker}})
		if err != nil {
			t.Fatal(err)
		}
		if got := len(page.Items) > 0; got != want {
			t.Errorf("?user=frank&command=%s: %d processes, want any: %v\n%s", marker, len(page.Items), want, dumpProcesses(page.Items))
		}
	}
}

// checkBridgeDebug: `kubectl debug` as the bridge mutates it. The kubelet
// starts the ephemeral container in the pod with the bridge's ID in the
// env of its spec (the bridge wrote it into the pods/ephemeralcontainers
// request); the audit record names the container and carries the
// annotation. Its init and what it runs are ivan's, exactly.
func checkBridgeDebug(t *testing.T, n *Node, client *api.Client, agent *AgentPod, podID string, p podSpec) {
	marker := "debug-" + testutil.RandomUUID()[:8]
	name := "debugger-" + testutil.RandomUUID()[:5]
	b := testutil.RandomUUID()
	// Not exec'd in place (busybox sh would exec a last command): the
	// init keeps the marker in its argv.
	cmd := []string{"/bin/sh", "-c", "/bin/echo " + marker + "; /bin/sleep 100000; true"}
	req := testutil.ExecRequest{AuditID: testutil.RandomUUID(), User: "ivan", Groups: []string{"sre"},
		Namespace: p.namespace, Pod: p.name, Container: name, Command: cmd, Received: time.Now(), Duration: time.Second,
		Annotations: map[string]string{vocab.BridgeWebhookName + "/" + vocab.BridgeKey: b}, Ephemeral: true}
	appendAuditLog(t, agent.AuditLog, req.LogLines())
	if _, err := n.StartContainer(podID, name, ociimage.BusyboxRef, cmd, vocab.BridgeKey+"="+b); err != nil {
		t.Fatal(err)
	}
	root := waitAttributed(t, client, p.name, marker)
	if root.Attribution != vocab.AttributionAuditID || root.AuditID != req.AuditID || root.Container != name {
		t.Errorf("debug container's init: %q %s in container %q (candidates %v, flags %v), want audit_id %s in %s",
			root.Attribution, root.AuditID, root.Container, root.Candidates, root.Flags, req.AuditID, name)
	}
	// What it ran is ivan's too, and returned for him.
	testutil.EventuallyNil(t, func() error {
		page, err := client.Processes(context.Background(), url.Values{"user": {"ivan"}, "command": {marker}})
		if err != nil {
			return err
		}
		for _, p := range page.Items {
			if p.Filename == "/bin/echo" && p.Attribution == vocab.AttributionInherited && p.AuditID == req.AuditID {
				return nil
			}
		}
		return fmt.Errorf("waiting for ivan's /bin/echo, inherited:\n%s", dumpProcesses(page.Items))
	})
}

// waitAttributed waits for the root of the processes whose command holds
// marker to be decided (attributed, or carrying every flag of want), and
// returns it.
func waitAttributed(t *testing.T, client *api.Client, pod, marker string, want ...string) join.Process {
	t.Helper()
	var root join.Process
	testutil.EventuallyNil(t, func() error {
		page, err := client.Processes(context.Background(), url.Values{"pod": {pod}, "command": {marker}})
		if err != nil {
			return err
		}
		r := byMarkerRoot(page.Items, marker)
		if r != nil && ((len(want) == 0 && r.Attribution != "") || (len(want) > 0 && hasAll(r.Flags, want))) {
			root = *r
			return nil
		}
		return fmt.Errorf("waiting for the root to be decided (flags %v):\n%s", want, dumpProcesses(page.Items))
	})
	return root
}

func hasAll(have, want []string) bool {
	for _, w := range want {
		if !slices.Contains(have, w) {
			return false
		}
	}
	return true
}
