package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/execid/correlator/internal/testutil"
	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/vocab"
)

// TestEndToEndBridge: no KEP-6035 anywhere. Two users' overlapping execs
// into one container, each rewritten by the exec bridge to `env
// CORRELATOR_EXEC_ID=<fresh id> <command>` and annotated in its audit
// event, are each attributed exactly (audit_id, not heuristic) through
// `correlator run` and the REST API. An uncovered exec that copies alice's
// bridge ID into the same argv is never hers.
func TestEndToEndBridge(t *testing.T) {
	m := marker()
	a := startE2E(t, "--keys", vocab.AuditIDKey+","+vocab.SPOKey+","+vocab.BridgeKey)
	ctx, cancel := context.WithCancel(context.Background())
	var running []chan struct{}
	t.Cleanup(func() {
		cancel()
		for _, d := range running {
			<-d
		}
	})
	type user struct {
		req    testutil.ExecRequest
		bridge string
	}
	var users []user
	for _, name := range []string{"alice", "bob"} {
		req := a.request(name, "sh", "-c", "...")
		req.Duration = 10 * time.Minute
		b := testutil.RandomUUID()
		req.Annotations = map[string]string{vocab.BridgeWebhookName + "/" + vocab.BridgeKey: b}
		a.writeLog(req)
		users = append(users, user{req, b})
		d := make(chan struct{})
		running = append(running, d)
		go func() {
			defer close(d)
			// The runtime execs the command as the bridge rewrote it;
			// no audit ID in the environment.
			_, _ = a.ctr.Exec(ctx, []string{"env", vocab.BridgeKey + "=" + b, "sh", "-c",
				"/bin/echo " + m + "-" + name + "-cmd; /bin/sleep 86400; true", m + "-" + name})
		}()
	}
	for _, u := range users {
		name := u.req.User
		a.waitFor(m+"-"+name, 0, func(ps []join.Process) error {
			if byArgv(ps, "/bin/echo", m+"-"+name+"-cmd") == nil {
				return fmt.Errorf("%s's command not stored yet", name)
			}
			return attributed(ps, u.req.AuditID, vocab.AttributionAuditID, vocab.AttributionInherited)
		})
	}
	// An exec that bypassed admission (nodes/proxy), mimicking the bridge
	// with alice's copied ID: a second root for her one request.
	alice := users[0]
	a.exec(testutil.ExecRequest{}, "env", vocab.BridgeKey+"="+alice.bridge, "sh", "-c", "/bin/echo "+m+"-uncovered; true", m+"-uncovered")
	a.waitFor(m+"-uncovered", 0, func(ps []join.Process) error {
		if byArgv(ps, "/bin/echo", m+"-uncovered") == nil {
			return fmt.Errorf("the uncovered exec's command not stored yet")
		}
		for _, p := range ps {
			if p.AuditID != "" || p.Attribution.Counted() {
				return fmt.Errorf("uncovered %s %q attributed %q to %s", p.ProcessID, p.Argv, p.Attribution, p.AuditID)
			}
		}
		return nil
	})
	checkUserFilter(t, a, "alice", nil, a.processes(m+"-uncovered"))
}
