package nodeharness

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/execid/correlator/internal/ociimage"
	"github.com/execid/correlator/internal/testutil"
	"github.com/execid/correlator/pkg/api"
	"github.com/execid/correlator/pkg/store"
)

// TestAgentPod's checks of the pod itself and of ID-less execs.

// checkAmbiguous runs an ID-less ExecSync that two audit records of the
// same pod and container match equally: the API must name both as
// candidates and attribute it to neither. (The heuristic subtest is the
// positive control: one record, one answer.)
func checkAmbiguous(t *testing.T, n *Node, client *api.Client, agent *AgentPod, ctr string) {
	marker := "amb-" + testutil.RandomUUID()[:8]
	cmd := []string{"/bin/sh", "-c", "/bin/echo " + marker + "; exit 0"}
	var reqs []testutil.ExecRequest
	for _, user := range []string{"frank", "grace"} {
		reqs = append(reqs, testutil.ExecRequest{AuditID: testutil.RandomUUID(), User: user, Groups: []string{"dev"},
			Namespace: "team-a", Pod: "web", Container: "app", Command: cmd, Received: time.Now(), Duration: 2 * time.Second})
	}
	if stdout, stderr, code, err := n.CRIExec(ctr, cmd); err != nil || code != 0 || !strings.Contains(stdout, marker) {
		t.Fatalf("ExecSync: %v, exit %d, stdout %q, stderr %q", err, code, stdout, stderr)
	}
	appendAuditLog(t, agent.AuditLog, append(reqs[0].LogLines(), reqs[1].LogLines()...))
	root := waitAttributed(t, client, "web", marker)
	t.Logf("ExecSync root with two matching records: attribution %q, auditID %q, candidates %v",
		root.Attribution, root.AuditID, root.Candidates)
	want := []string{reqs[0].AuditID, reqs[1].AuditID}
	slices.Sort(want)
	got := slices.Sorted(slices.Values(root.Candidates))
	if root.Attribution != "ambiguous" || root.AuditID != "" || !slices.Equal(got, want) {
		t.Errorf("attributed %q to %q, candidates %v; want ambiguous, no ID, candidates %v",
			root.Attribution, root.AuditID, got, want)
	}
}

// checkFirstProcessHasPod runs one ID-less probe in a pod started moments
// before and checks that the agent stored it with its pod. The agent
// resolves a container once, on its first process; a container started
// within the CRI listing limiter's interval of the last listing used to be
// a cached miss, stored with no pod at all. pkg/meta now asks the CRI about
// that one container (ContainerStatus).
func checkFirstProcessHasPod(t *testing.T, n *Node, client *api.Client, ctr string, p podSpec) {
	t.Helper()
	marker := "probe-" + testutil.RandomUUID()[:8]
	if _, _, _, err := n.CRIExec(ctr, []string{"/bin/echo", marker}); err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyNil(t, func() error {
		page, err := client.Processes(context.Background(), url.Values{"command": {marker}})
		if err != nil {
			return err
		}
		if len(page.Items) == 0 {
			return fmt.Errorf("waiting for the probe in %s/%s to be stored", p.namespace, p.name)
		}
		return nil
	})
	page, err := client.Processes(context.Background(), url.Values{"command": {marker}})
	if err != nil {
		t.Fatal(err)
	}
	if q := page.Items[0]; q.Pod != p.name || q.Namespace != p.namespace || q.Container != "app" {
		t.Fatalf("the first process in %s/%s was stored in %q/%q/%q: a new container's first processes lose their pod",
			p.namespace, p.name, q.Namespace, q.Pod, q.Container)
	}
}

// checkConfinement reads the agent's process from the host: the chart's
// securityContext as the kernel applied it.
func checkConfinement(t *testing.T, n *Node, agent *AgentPod) {
	pid, err := n.ContainerPID(agent.ContainerID)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	status := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			status[k] = strings.TrimSpace(v)
		}
	}
	// CAP_DAC_READ_SEARCH 2, CAP_SYS_PTRACE 19, CAP_PERFMON 38, CAP_BPF 39.
	caps := fmt.Sprintf("%016x", uint64(1)<<2|1<<19|1<<38|1<<39)
	want := map[string]string{"CapEff": caps, "CapPrm": caps, "CapBnd": caps, "Seccomp": "2", "NoNewPrivs": "1"}
	for k, v := range want {
		if status[k] != v {
			t.Errorf("agent %s: %q, want %q", k, status[k], v)
		}
	}
	if !strings.HasPrefix(status["Uid"], "0\t") {
		t.Errorf("agent Uid: %q, want 0", status["Uid"])
	}
	mi, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(mi), "\n") {
		if f := strings.Fields(line); len(f) > 5 && f[4] == "/" && !strings.HasPrefix(f[5], "ro") {
			t.Errorf("agent root mounted %s, want read-only", f[5])
		}
	}
	// hostPID: the agent shares the test's (the host's) PID namespace.
	if root, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid)); err != nil {
		t.Error(err)
	} else if host, _ := os.Readlink("/proc/self/ns/pid"); root != host {
		t.Errorf("agent PID namespace %s, want the host's %s", root, host)
	}
	t.Logf("agent pid %d: CapEff %s Seccomp %s NoNewPrivs %s", pid, status["CapEff"], status["Seccomp"], status["NoNewPrivs"])
}

// buildCorrelatorImage builds the static binary and its OCI archive.
func buildCorrelatorImage(t *testing.T, dir string) string {
	t.Helper()
	bin, archive := filepath.Join(dir, "correlator"), filepath.Join(dir, "correlator.oci.tar")
	build := exec.Command("go", "build", "-trimpath", "-o", bin, "github.com/execid/correlator/cmd/correlator")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building correlator: %v: %s", err, out)
	}
	if err := ociimage.Correlator(archive, bin); err != nil {
		t.Fatal(err)
	}
	return archive
}

// labelRule is the extra alert rule TestAgentPod installs through the
// chart: one alert per session in a pod labelled app=db (team-b/db, not
// team-a/web, whose label is app=web), its message naming the label's
// value through the label.NAME template field.
const labelRule = "test-pod-label-app-db"

// labelRules is the chart's alerts.rules value: the shipped rules file
// with labelRule appended, so the agent keeps the rules it ships with.
func labelRules(t *testing.T) string {
	t.Helper()
	shipped, err := os.ReadFile(filepath.Join("..", "..", "pkg", "alert", "rules", "default.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimRight(string(shipped), "\n") + `

  - name: ` + labelRule + `
    description: TestAgentPod's rule on a pod label of one pod only.
    severity: low
    scope: session
    message: "label app=$(label.app) on $(user)'s exec into $(namespace)/$(pod)"
    match:
      labels: {app: db}
`
}

// helmSetValue is a --set argument that sets key to the string value
// verbatim: helm's --set reads `\x` as a literal x and ends a value at
// an unescaped comma.
func helmSetValue(key, value string) string {
	r := strings.NewReplacer(`\`, `\\`, `,`, `\,`)
	return key + "=" + r.Replace(value)
}

// checkLabelAlerts judges GET /api/v1/alerts?rule=labelRule: the rule
// on the db pod's label app=db fired for each session in team-b/db (the
// positive control: pod labels went from the CRI's sandboxes through
// pkg/meta to the rule and its message) and, once those are seen, for
// none of the sessions in team-a/web (labelled app=web), all of which are
// already stored.
func checkLabelAlerts(t *testing.T, agent *AgentPod, sessions []*agentSession) {
	var alerts []store.Alert
	testutil.EventuallyNil(t, func() error {
		var err error
		if alerts, err = listAlerts(agent, url.Values{"rule": {labelRule}, "limit": {"500"}}); err != nil {
			return err
		}
		for _, s := range sessions {
			if s.req.Pod == "db" && !slices.ContainsFunc(alerts, func(a store.Alert) bool { return a.AuditID == s.req.AuditID }) {
				return fmt.Errorf("waiting for %s on %s's session %s in %s/%s; alerts so far:\n%s",
					labelRule, s.req.User, s.req.AuditID, s.req.Namespace, s.req.Pod, dumpAlerts(alerts))
			}
		}
		return nil
	})
	// The web sessions were stored before this subtest began; take a
	// fresh page now that the db ones' alerts are out.
	alerts, err := listAlerts(agent, url.Values{"rule": {labelRule}, "limit": {"500"}})
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string]*agentSession{}
	for _, s := range sessions {
		byID[s.req.AuditID] = s
	}
	for _, a := range alerts {
		s := byID[a.AuditID]
		switch {
		case s != nil && s.req.Pod != "db":
			t.Errorf("%s fired on %s's session %s in %s/%s (label app=web): %q",
				labelRule, s.req.User, a.AuditID, s.req.Namespace, s.req.Pod, a.Message)
		case s != nil:
			want := fmt.Sprintf("label app=db on %s's exec into team-b/db", s.req.User)
			if a.Message != want || a.ProcessID != "" || a.Severity != "low" {
				t.Errorf("%s on session %s: message %q, process %q, severity %q; want %q, no process, low",
					labelRule, a.AuditID, a.Message, a.ProcessID, a.Severity, want)
			}
		default:
			t.Errorf("%s fired on %q, no session of the test: %q", labelRule, a.AuditID, a.Message)
		}
	}
	t.Logf("%s alerts:\n%s", labelRule, dumpAlerts(alerts))
}

// listAlerts is GET /api/v1/alerts with q.
func listAlerts(agent *AgentPod, q url.Values) ([]store.Alert, error) {
	req, err := http.NewRequest(http.MethodGet, agent.Base+"/api/v1/alerts?"+q.Encode(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+agent.Token)
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /api/v1/alerts: %s", resp.Status)
	}
	var page api.Page[store.Alert]
	if err := json.NewDecoder(resp.Body).Decode(&page); err != nil {
		return nil, fmt.Errorf("GET /api/v1/alerts: %w", err)
	}
	return page.Items, nil
}

func dumpAlerts(as []store.Alert) string {
	var b strings.Builder
	for _, a := range as {
		fmt.Fprintf(&b, "  %s %s audit=%s process=%s %q\n", a.Rule, a.Severity, a.AuditID, a.ProcessID, a.Message)
	}
	return b.String()
}

// checkRootExecsInPlace: `kubectl exec -- sh -c '...; /bin/echo x'` makes
// busybox exec echo in the root's own process. The session's root must
// still be its root (audit_id, no flags), now showing the later image,
// and never a process "inherited" from outside the session.
func checkRootExecsInPlace(t *testing.T, n *Node, client *api.Client, agent *AgentPod, ctr string, p podSpec) {
	marker := "inplace-" + testutil.RandomUUID()[:8]
	s := &agentSession{
		req: testutil.ExecRequest{AuditID: testutil.RandomUUID(), User: "carol", Groups: []string{"dev"},
			Namespace: p.namespace, Pod: p.name, Container: "app",
			Command:  []string{"/bin/sh", "-c", "/bin/sleep 1; /bin/echo " + marker},
			Received: time.Now(), Duration: 3 * time.Second},
		container: ctr, webhook: true, marker: marker}
	e, err := n.StartExec(ctr, s.req.Command, auditKey+"="+s.req.AuditID)
	if err != nil {
		t.Fatal(err)
	}
	deliverAudit(t, agent, []*agentSession{s})
	if code, out, err := e.Wait(); err != nil || code != 0 || !strings.Contains(out, marker) {
		t.Fatalf("exec: exit %d, %v, output %q", code, err, out)
	}
	var v api.SessionView
	testutil.EventuallyNil(t, func() error {
		var err error
		if v, err = client.Session(context.Background(), s.req.AuditID); err != nil {
			return err
		}
		for _, q := range v.Processes {
			if len(q.Argv) == 2 && q.Argv[0] == "/bin/echo" && q.Argv[1] == marker && !q.Exit.IsZero() {
				return nil
			}
		}
		return fmt.Errorf("waiting for the in-place echo, exited:\n%s", dumpProcesses(v.Processes))
	})
	for _, q := range v.Processes {
		if len(q.Argv) == 2 && q.Argv[0] == "/bin/echo" {
			if q.Attribution != "audit_id" || q.AuditID != s.req.AuditID || len(q.Flags) != 0 {
				t.Errorf("the root after exec in place: %q attributed %q to %q, flags %v; want audit_id, no flags",
					q.Argv, q.Attribution, q.AuditID, q.Flags)
			}
		}
	}
}
