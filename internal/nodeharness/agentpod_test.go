package nodeharness

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/execid/correlator/internal/ociimage"
	"github.com/execid/correlator/internal/testutil"
	"github.com/execid/correlator/pkg/api"
	"github.com/execid/correlator/pkg/join"
)

// agentSession is one `kubectl exec` of the test: its audit record, the
// container it lands in, and how its record reaches the agent.
type agentSession struct {
	req       testutil.ExecRequest
	container string // CRI container ID
	webhook   bool   // POSTed to the webhook, else appended to the audit log
	marker    string
	exec      *Exec
}

// TestAgentPod runs correlator from its OCI image as the Helm chart's
// DaemonSet pod (its securityContext, mounts and rendered config) on a
// real containerd, and judges it by its REST API alone: overlapping
// sessions of two users (one impersonating) in two pods of two namespaces,
// their audit records half in the tailed log and half through the webhook,
// and an exec through the CRI's own ExecSync with no ID.
func TestAgentPod(t *testing.T) {
	testutil.RequireRoot(t)
	began := time.Now()
	t.Cleanup(func() { t.Logf("whole test: %v", time.Since(began).Round(time.Millisecond)) })
	dir := t.TempDir()
	n := Start(t, Options{Archives: []string{buildCorrelatorImage(t, dir)}})
	n.WaitImage(ociimage.CorrelatorRef)
	nodeUp := time.Since(began)
	// The chart's alerts.rules: the shipped rules and one on a pod label
	// only the db pod has (checkLabelAlerts).
	agent := n.RunAgentPod(t, filepath.Join("..", "..", "deploy", "helm", "correlator"), dir,
		helmSetValue("alerts.rules", labelRules(t)), "bridge.enabled=true")
	t.Logf("node up in %v, agent pod ready %v later", nodeUp.Round(time.Millisecond),
		(time.Since(began) - nodeUp).Round(time.Millisecond))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("agent log:\n%s", tail(n.ContainerLog(agent.ContainerID), 6000))
		}
	})
	client := &api.Client{BaseURL: agent.Base, Token: agent.Token, HTTP: &http.Client{Timeout: 10 * time.Second}}

	pods := []podSpec{
		{"team-a", "web", testutil.RandomUUID(), map[string]string{"app": "web"}},
		{"team-b", "db", testutil.RandomUUID(), map[string]string{"app": "db"}},
	}
	ctrs := map[string]string{}   // pod name → container ID
	podIDs := map[string]string{} // pod name → sandbox ID
	for _, p := range pods {
		podID, err := n.RunPod(p.namespace, p.name, p.uid, p.labels)
		if err != nil {
			t.Fatal(err)
		}
		podIDs[p.name] = podID
		if ctrs[p.name], err = n.StartContainer(podID, "app", ociimage.BusyboxRef, []string{"/bin/sleep", "100000"}); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("confinement", func(t *testing.T) { checkConfinement(t, n, agent) })
	// The first process of each pod, started moments ago, has its pod.
	for _, p := range pods {
		checkFirstProcessHasPod(t, n, client, ctrs[p.name], p)
	}

	// Four overlapping sessions: every one starts before any ends.
	now := time.Now()
	var sessions []*agentSession
	for i, s := range []struct {
		user, as string
		pod      podSpec
		webhook  bool
	}{
		{"alice", "", pods[0], false},
		{"alice", "", pods[1], true},
		{"bob", "", pods[0], true},
		{"bob", "ops-admin", pods[1], false},
	} {
		marker := fmt.Sprintf("m%d-%s", i, testutil.RandomUUID()[:8])
		cmd := []string{"/bin/sh", "-c", "/bin/sleep 2; /bin/echo " + marker + "; exit 0"}
		sessions = append(sessions, &agentSession{
			req: testutil.ExecRequest{AuditID: testutil.RandomUUID(), User: s.user, Groups: []string{"dev"}, As: s.as,
				Namespace: s.pod.namespace, Pod: s.pod.name, Container: "app", Command: cmd,
				Received: now, Duration: 5 * time.Second},
			container: ctrs[s.pod.name], webhook: s.webhook, marker: marker})
	}
	for _, s := range sessions {
		e, err := n.StartExec(s.container, s.req.Command, auditKey+"="+s.req.AuditID)
		if err != nil {
			t.Fatal(err)
		}
		s.exec = e
	}
	deliverAudit(t, agent, sessions)
	for _, s := range sessions {
		code, out, err := s.exec.Wait()
		if err != nil || code != 0 || !strings.Contains(out, s.marker) {
			t.Fatalf("exec %s: exit %d, %v, output %q", s.req.AuditID, code, err, out)
		}
	}

	for _, s := range sessions {
		t.Run("session "+s.req.User+" "+s.req.Namespace+"/"+s.req.Pod, func(t *testing.T) {
			checkSession(t, client, s)
		})
	}

	t.Run("processes by pod", func(t *testing.T) {
		for _, p := range pods {
			checkPodProcesses(t, client, p, sessions)
		}
	})

	// After every session is stored (the session subtests waited for each).
	t.Run("alert on pod label", func(t *testing.T) { checkLabelAlerts(t, agent, sessions) })

	t.Run("CRI exec matching two records", func(t *testing.T) { checkAmbiguous(t, n, client, agent, ctrs["web"]) })

	t.Run("CRI streaming exec without ID", func(t *testing.T) {
		marker := "cri-" + testutil.RandomUUID()[:8]
		cmd := []string{"/bin/sh", "-c", "/bin/echo " + marker + "; exit 0"}
		erin := testutil.ExecRequest{AuditID: testutil.RandomUUID(), User: "erin", Groups: []string{"dev"},
			Namespace: "team-b", Pod: "db", Container: "app", Command: cmd, Received: time.Now(), Duration: 2 * time.Second}
		// The CRI's own streaming Exec, as `kubectl exec` reaches a
		// runtime that does not inject the ID: the fallback path.
		stdout, stderr, err := n.CRIStreamExec(ctrs["db"], cmd)
		if err != nil || !strings.Contains(stdout, marker) {
			t.Fatalf("streaming Exec: %v, stdout %q, stderr %q", err, stdout, stderr)
		}
		appendAuditLog(t, agent.AuditLog, erin.LogLines())
		root := waitAttributed(t, client, "db", marker)
		t.Logf("ExecSync root: attribution %q, auditID %q, confidence %v, candidates %v, flags %v",
			root.Attribution, root.AuditID, root.Confidence, root.Candidates, root.Flags)
		switch root.Attribution {
		case "heuristic":
			if root.AuditID != erin.AuditID || root.Confidence <= 0 || root.Confidence >= 1 {
				t.Errorf("heuristic answer %q with confidence %v, want erin's %s with 0 < confidence < 1",
					root.AuditID, root.Confidence, erin.AuditID)
			}
		case "ambiguous":
			if !slices.Contains(root.Candidates, erin.AuditID) {
				t.Errorf("ambiguous candidates %v lack erin's %s", root.Candidates, erin.AuditID)
			}
		default:
			t.Errorf("ExecSync root attributed %q, want heuristic or ambiguous", root.Attribution)
		}
		if root.Pod != "db" || root.Namespace != "team-b" || root.Container != "app" || root.ContainerID != ctrs["db"] {
			t.Errorf("ExecSync root in %s/%s/%s (%s), want team-b/db/app (%s)",
				root.Namespace, root.Pod, root.Container, root.ContainerID, ctrs["db"])
		}
	})

	t.Run("exec bridge, overlapping", func(t *testing.T) { checkBridge(t, n, client, agent, ctrs["db"], pods[1]) })
	t.Run("exec bridge, kubectl debug", func(t *testing.T) { checkBridgeDebug(t, n, client, agent, podIDs["db"], pods[1]) })

	// Last: its record must not be a candidate for the ID-less execs above.
	t.Run("root execs in place", func(t *testing.T) { checkRootExecsInPlace(t, n, client, agent, ctrs["web"], pods[0]) })
}

// waitAttributed waits for the shell whose argv has marker, in pod, to be
// attributed one way or another, and returns it.
// deliverAudit hands the records over as kube-apiserver would: the log
// backend's lines appended to the file, the webhook backend's one batch.
func deliverAudit(t *testing.T, agent *AgentPod, sessions []*agentSession) {
	t.Helper()
	var batch []testutil.ExecRequest
	for _, s := range sessions {
		if s.webhook {
			batch = append(batch, s.req)
		} else {
			appendAuditLog(t, agent.AuditLog, s.req.LogLines())
		}
	}
	req, err := http.NewRequest(http.MethodPost, agent.Base+api.WebhookPath, bytes.NewReader(testutil.EventListOf(batch...)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+agent.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("webhook POST: %s", resp.Status)
	}
}

func appendAuditLog(t *testing.T, path string, lines []byte) {
	t.Helper()
	if err := appendFile(path, lines); err != nil {
		t.Fatal(err)
	}
}

// checkSession judges one session by GET /api/v1/sessions/<auditID>: its
// user and pod from the record, and its root process, exec'd with the ID,
// found in the right pod and container.
func checkSession(t *testing.T, client *api.Client, s *agentSession) {
	var v api.SessionView
	testutil.EventuallyNil(t, func() error {
		var err error
		if v, err = client.Session(context.Background(), s.req.AuditID); err != nil {
			return err
		}
		if byMarkerRoot(v.Processes, s.marker) == nil || len(v.Stages) < 3 {
			return fmt.Errorf("waiting for session %s: stages %v, processes:\n%s", s.req.AuditID, v.Stages, dumpProcesses(v.Processes))
		}
		return nil
	})
	if v.User.Username != s.req.User || v.Namespace != s.req.Namespace || v.Pod != s.req.Pod || v.Container != "app" {
		t.Errorf("session %s: user %q in %s/%s/%s, want %q in %s/%s/app",
			s.req.AuditID, v.User.Username, v.Namespace, v.Pod, v.Container, s.req.User, s.req.Namespace, s.req.Pod)
	}
	switch {
	case s.req.As == "" && v.ImpersonatedUser != nil:
		t.Errorf("session %s: impersonated user %+v, want none", s.req.AuditID, *v.ImpersonatedUser)
	case s.req.As != "" && (v.ImpersonatedUser == nil || v.ImpersonatedUser.Username != s.req.As):
		t.Errorf("session %s: impersonated user %+v, want %q", s.req.AuditID, v.ImpersonatedUser, s.req.As)
	}
	root := byMarkerRoot(v.Processes, s.marker)
	if root.Attribution != "audit_id" || root.AuditID != s.req.AuditID || len(root.Flags) != 0 {
		t.Errorf("session %s: root attributed %q to %q, flags %v; want audit_id, no flags", s.req.AuditID, root.Attribution, root.AuditID, root.Flags)
	}
	for _, p := range v.Processes {
		if p.Namespace != s.req.Namespace || p.Pod != s.req.Pod || p.Container != "app" || p.ContainerID != s.container {
			t.Errorf("session %s: process %s %q in %s/%s/%s (%s), want %s/%s/app (%s)", s.req.AuditID, p.ProcessID,
				p.Argv, p.Namespace, p.Pod, p.Container, p.ContainerID, s.req.Namespace, s.req.Pod, s.container)
		}
	}
	t.Logf("session %s (%s as %v, %s/%s): %d processes\n%s", s.req.AuditID, v.User.Username, v.ImpersonatedUser,
		v.Namespace, v.Pod, len(v.Processes), dumpProcesses(v.Processes))
}

// checkPodProcesses judges GET /api/v1/processes?pod=...: it lists the
// roots of this pod's sessions (the positive control) and no process of
// the other pod's sessions.
func checkPodProcesses(t *testing.T, client *api.Client, p podSpec, sessions []*agentSession) {
	page, err := client.Processes(context.Background(), url.Values{"pod": {p.name}, "namespace": {p.namespace}, "limit": {"500"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range sessions {
		root := byMarkerRoot(page.Items, s.marker)
		mine := s.req.Pod == p.name
		if mine && (root == nil || root.AuditID != s.req.AuditID) {
			t.Errorf("processes?pod=%s: no root of %s's session %s", p.name, s.req.User, s.req.AuditID)
		}
		if !mine && root != nil {
			t.Errorf("processes?pod=%s lists %s's session %s in pod %s", p.name, s.req.User, s.req.AuditID, s.req.Pod)
		}
	}
	for _, q := range page.Items {
		if q.Pod != p.name || q.Namespace != p.namespace {
			t.Errorf("processes?pod=%s lists %s in %s/%s", p.name, q.ProcessID, q.Namespace, q.Pod)
		}
	}
}

// byMarkerRoot finds the session's root: the shell whose argv has marker.
func byMarkerRoot(ps []join.Process, marker string) *join.Process {
	for i := range ps {
		if ps[i].Filename == "/bin/sh" && strings.Contains(strings.Join(ps[i].Argv, " "), marker) {
			return &ps[i]
		}
	}
	return nil
}

func dumpProcesses(ps []join.Process) string {
	var b strings.Builder
	for _, p := range ps {
		fmt.Fprintf(&b, "  %s parent=%s %s/%s/%s argv=%q audit=%s claimed=%s attr=%s conf=%v flags=%v\n",
			p.ProcessID, p.ParentProcessID, p.Namespace, p.Pod, p.Container, p.Argv, p.AuditID,
			p.ClaimedAuditID, p.Attribution, p.Confidence, p.Flags)
	}
	return b.String()
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
