//go:build e2ecluster

package kubeapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/execid/correlator/internal/testutil"
	"github.com/execid/correlator/pkg/api"
	"github.com/execid/correlator/pkg/cluster"
	"github.com/execid/correlator/pkg/vocab"
)

// TestRealCluster is `make e2e-cluster`: `kubectl exec` through
// kube-apiserver (authn, RBAC, admission, both audit backends), a real
// kubelet (its TLS port, CRI streaming), containerd and runc, into a pod
// the kubelet runs; correlator's agent installed from the chart, its pod
// started by the kubelet; the answers read with `kubectl correlator` on
// PATH, run by the real kubectl, as a responder. The scenario runs once
// with Debian's runc and once with the runc current runtimes ship.
func TestRealCluster(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.EnsureBPFFS(t)
	b := buildCluster(t)
	for _, rt := range []struct{ name, bin string }{
		{"Debian's runc", ""},
		{"runc " + runcVersion, b.runc},
	} {
		t.Run(rt.name, func(t *testing.T) { realClusterScenario(t, b, rt.bin) })
	}
}

// realClusterScenario is the scenario on a fresh cluster whose containerd
// runs runc (empty: Debian's).
func realClusterScenario(t *testing.T, b *clusterBuild, runc string) {
	rendered := renderBridge(t)
	c := startRealCluster(t, b, runc, []apiUser{alice, bob, carol, eve, responder})
	v := runcVersionOf(t, c.node.Runc)
	if runc == "" && "v"+v == runcVersion {
		t.Fatalf("Debian's runc is %s too: this run would not cover another runc", v)
	}
	t.Logf("containerd runs %s, runc %s", c.node.Runc, v)
	s := c.api
	// The bridge first: it makes the correlator namespace.
	installBridge(t, s, c.correlator, rendered)
	c.publishRootCA(t, "correlator")
	agentPod := c.installAgent(t, c.agent)
	t.Logf("agent pod %s/%s started by the kubelet", agentPod.Namespace, agentPod.Name)
	bindResponders(t, s, responder.groups)

	c.namespace(t, "shop")
	createRoles(t, s, "shop")
	c.workload(t, "shop", "web-0", map[string]string{"app": "web"})
	waitRBACFor(t, s)
	// A pod on no node, for waitBridge's dry runs (an admission request
	// the agents would record against web-0).
	createPod(t, s, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "probe-0", Namespace: "shop"},
		Spec: corev1.PodSpec{NodeName: "parked", Containers: []corev1.Container{{Name: "app", Image: "example.invalid/probe:1"}}}})
	waitBridge(t, s, "shop", "probe-0")
	t.Logf("cluster ready in %s", time.Since(c.started).Round(time.Millisecond))

	// The plugin on PATH, found and run by kubectl.
	plugDir := t.TempDir()
	if err := os.Symlink(c.correlator, filepath.Join(plugDir, "kubectl-correlator")); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", plugDir+":"+os.Getenv("PATH"))
	resp := c.plugin(t, responder, "shop")

	var aliceID string
	t.Run("two users' overlapping kubectl exec", func(t *testing.T) {
		began := time.Now()
		var wg sync.WaitGroup
		results := make([]result, 2)
		for i, run := range []struct {
			u   apiUser
			cmd string
		}{
			// A background child that outlives the exec, forked after
			// the bridge's variable is removed.
			{alice, "echo alice-in; unset " + vocab.BridgeKey + "; (sleep 4; cat /etc/hostname) >/dev/null 2>&1 & sleep 3; echo alice-out"},
			{bob, "sleep 1; echo bob-in; cat /proc/version >/dev/null; echo bob-out"},
		} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				results[i] = c.kubectl(t, run.u, "shop").run(t, "exec", "web-0", "--", "sh", "-c", run.cmd)
			}()
		}
		wg.Wait()
		for i, want := range []string{"alice-in\nalice-out\n", "bob-in\nbob-out\n"} {
			if results[i].code != 0 || results[i].stdout != want {
				t.Fatalf("kubectl exec: want %q:\n%s", want, results[i])
			}
		}
		t.Logf("both sessions ran in %s", time.Since(began).Round(time.Millisecond))

		var got cluster.Answer[cluster.Session]
		testutil.EventuallyNil(t, func() error {
			got = decode[cluster.Session](t, resp.quiet(t, "sessions", "--pod", "web-0", "-o", "json"))
			users := map[string]bool{}
			for _, s := range got.Items {
				if s.ProcessCount > 0 {
					users[s.User.Username] = true
				}
			}
			if !users[alice.name] || !users[bob.name] {
				return fmt.Errorf("sessions into web-0 with processes: %v, want alice and bob", users)
			}
			return nil
		})
		for _, s := range got.Items {
			t.Logf("session %s: user %s pod %s/%s command %q processes %d", s.AuditID, s.User.Username,
				s.Namespace, s.Pod, s.Command, s.ProcessCount)
			if s.User.Username != alice.name && s.User.Username != bob.name {
				continue
			}
			want := map[string]string{alice.name: "cat /etc/hostname", bob.name: "cat /proc/version"}[s.User.Username]
			checkExact(t, resp, s.AuditID, s.User.Username, want)
			if s.User.Username == alice.name {
				aliceID = s.AuditID
			}
		}
		r := resp.must(t, "who", "web-0", "-o", "wide")
		wantIn(t, r.stdout, "alice", "bob", "cat /etc/hostname (inherited)", "cat /proc/version (inherited)")
		saveOutput(t, "cluster-who.txt", r)
	})

	t.Run("a third user reuses alice's audit ID", func(t *testing.T) {
		if aliceID == "" {
			t.Fatal("no session of alice's to reuse")
		}
		out, err := c.execWithAuditID(t, carol, "shop", "web-0", aliceID, "sh", "-c", "echo carol-in; cat /proc/cpuinfo >/dev/null")
		if err != nil || out != "carol-in\n" {
			t.Fatalf("carol's exec with Audit-ID %s: %q, %v", aliceID, out, err)
		}
		testutil.EventuallyNil(t, func() error {
			r := resp.quiet(t, "session", aliceID)
			if !strings.Contains(r.stdout, "carol") {
				return fmt.Errorf("session %s does not name carol yet:\n%s", aliceID, r)
			}
			return nil
		})
		r := resp.must(t, "session", aliceID)
		saveOutput(t, "cluster-session-reused.txt", r)
		v := decode[cluster.SessionView](t, resp.must(t, "session", aliceID, "-o", "json"))
		if len(v.Items) != 1 {
			t.Fatalf("session %s: %d views, want alice's alone", aliceID, len(v.Items))
		}
		d := v.Items[0]
		if d.User.Username != alice.name || len(d.Conflicts) != 1 || d.Conflicts[0].User.Username != carol.name {
			t.Errorf("session %s: user %s, conflicts %+v; want alice's, carol's request as the one conflict",
				aliceID, d.User.Username, d.Conflicts)
		}
		// Alice's processes stay hers, flagged; carol's are not among them.
		for _, p := range d.Processes {
			argv := strings.Join(p.Argv, " ")
			if strings.Contains(argv, "carol") || argv == "cat /proc/cpuinfo" {
				t.Errorf("session %s: carol's process %q in alice's session", aliceID, argv)
			}
			if !slices.Contains(p.Flags, "audit_id_conflict") {
				t.Errorf("session %s: process %q flags %v, want audit_id_conflict", aliceID, argv, p.Flags)
			}
			// The background child, forked after the variable was removed.
			if argv == "cat /etc/hostname" && !slices.Contains(p.Flags, "env_removed") {
				t.Errorf("session %s: the background child's flags %v, want env_removed", aliceID, p.Flags)
			}
		}
	})

	t.Run("kubectl debug", func(t *testing.T) { c.debugSession(t, resp) })

	t.Run("the agent rolls out to a new image while a session runs", func(t *testing.T) {
		agentPod = c.rollout(t, resp, agentPod)
	})

	t.Run("both audit backends reach the agent", func(t *testing.T) {
		a := c.agent
		const batches = "correlator_audit_webhook_requests_total"
		unauth := a.metric(t, batches, "result", "unauthorized")
		// The token the apiserver's webhook kubeconfig carries, sent by
		// hand, and a wrong one: the controls.
		if code := a.postWebhook(t, a.token); code != http.StatusOK {
			t.Errorf("an empty batch with the chart's token: %d, want 200", code)
		}
		if code := a.postWebhook(t, "not-"+a.token); code != http.StatusUnauthorized {
			t.Errorf("an empty batch with a wrong token: %d, want 401", code)
		}
		ours := a.metric(t, batches, "result", "ok")
		testutil.EventuallyNil(t, func() error {
			file := a.metric(t, "correlator_audit_records_read_total", "source", "file")
			hook := a.metric(t, batches, "result", "ok") - ours
			if file == 0 || hook <= 0 {
				return fmt.Errorf("records read from the log: %v; the apiserver's webhook batches taken: %v", file, hook)
			}
			return nil
		})
		// The wrong token above is the one refusal.
		if n := a.metric(t, batches, "result", "unauthorized"); n != unauth+1 {
			t.Errorf("the agent refused %v webhook batches as unauthorized, want %v (the wrong token's)", n, unauth+1)
		}
	})

	t.Run("a denied exec is no one's session", func(t *testing.T) {
		r := c.kubectl(t, eve, "shop").run(t, "exec", "web-0", "--", "sh", "-c", "echo eve-was-here")
		if r.code == 0 || !strings.Contains(r.stderr, "Forbidden") || strings.Contains(r.stdout, "eve-was-here") {
			t.Fatalf("eve's exec: want Forbidden, nothing run:\n%s", r)
		}
		got := decode[cluster.Session](t, resp.must(t, "sessions", "--user", eve.name, "-o", "json"))
		for _, s := range got.Items {
			if s.ProcessCount > 0 {
				t.Errorf("eve's denied exec has a session with %d processes: %+v", s.ProcessCount, s)
			}
		}
	})

	t.Run("alerts", func(t *testing.T) {
		// Carol's request reused alice's ID: its session key is the ID
		// with a suffix of its own.
		var carolKey string
		for _, s := range decode[cluster.Session](t, resp.must(t, "sessions", "--user", carol.name, "-o", "json")).Items {
			carolKey = s.AuditID
		}
		if carolKey == "" || aliceID == "" || !strings.HasPrefix(carolKey, aliceID+"~") {
			t.Fatalf("carol's session %q, alice's %q: want carol's under alice's ID", carolKey, aliceID)
		}
		reuse := []string{aliceID, carolKey}
		// The rules raise on the reused ID alone: both sessions are
		// audit-id-reused, their processes audit_id_conflict; kubectl
		// debug, the rollout's session and the denied exec raise nothing.
		var got cluster.Answer[cluster.Alert]
		testutil.EventuallyNil(t, func() error {
			got = decode[cluster.Alert](t, resp.quiet(t, "alerts", "--rule", "audit-id-reused", "-o", "json"))
			var ids []string
			for _, a := range got.Items {
				ids = append(ids, a.AuditID)
			}
			slices.Sort(ids)
			if !slices.Equal(ids, reuse) {
				return fmt.Errorf("audit-id-reused alerts about %q, want %q", ids, reuse)
			}
			return nil
		})
		all := decode[cluster.Alert](t, resp.must(t, "alerts", "-o", "json"))
		for _, a := range all.Items {
			if hostAlert(a) {
				continue // the machine's own execs (another test's), outside this cluster's pods
			}
			if (a.Rule != "audit-id-reused" && a.Rule != "tamper-audit-id-conflict") || !slices.Contains(reuse, a.AuditID) {
				t.Errorf("alert %s (%s) about session %q process %q: %s; want only the reused ID's", a.Rule,
					a.Severity, a.AuditID, a.ProcessID, a.Message)
			}
		}
		saveOutput(t, "cluster-alerts.txt", resp.must(t, "alerts"))
	})
}

// hostAlert reports whether a is about a host process: no pod, so none of
// this cluster's; the agent watches the whole machine, which other tests
// may be using.
func hostAlert(a cluster.Alert) bool {
	var pl struct {
		Process *struct {
			Namespace string `json:"namespace"`
			Pod       string `json:"pod"`
		} `json:"process"`
	}
	return json.Unmarshal(a.Payload, &pl) == nil && pl.Process != nil && pl.Process.Namespace == "" && pl.Process.Pod == ""
}

// checkExact reads session id with the plugin: user's, in shop/web-0,
// every process attributed by the bridge's ID (audit_id, or inherited
// from it), one of them running want (argv joined by spaces).
func checkExact(t *testing.T, resp pluginAs, id, user, want string) {
	t.Helper()
	checkExactIn(t, resp, id, user, "app", want)
}

// checkExactIn is checkExact for a session into container.
func checkExactIn(t *testing.T, resp pluginAs, id, user, container, want string) {
	t.Helper()
	var d cluster.SessionView
	testutil.EventuallyNil(t, func() error {
		v := decode[cluster.SessionView](t, resp.quiet(t, "session", id, "-o", "json"))
		if len(v.Items) != 1 {
			return fmt.Errorf("session %s: %d views, want 1", id, len(v.Items))
		}
		d = v.Items[0]
		for _, p := range d.Processes {
			if strings.Join(p.Argv, " ") == want {
				return nil
			}
		}
		var argvs [][]string
		for _, p := range d.Processes {
			argvs = append(argvs, p.Argv)
		}
		return fmt.Errorf("session %s: no process running %q yet: %q", id, want, argvs)
	})
	if d.Session.User.Username != user || d.Session.Namespace != "shop" || d.Session.Pod != "web-0" ||
		d.Session.Container != container {
		t.Errorf("session %s: user %s pod %s/%s container %s, want %s shop/web-0 %s", id, d.Session.User.Username,
			d.Session.Namespace, d.Session.Pod, d.Session.Container, user, container)
	}
	var argvs []string
	var walk func(ns []*api.TreeNode)
	walk = func(ns []*api.TreeNode) {
		for _, n := range ns {
			argvs = append(argvs, strings.Join(n.Argv, " "))
			if n.Attribution != vocab.AttributionAuditID && n.Attribution != vocab.AttributionInherited {
				t.Errorf("session %s: process %q attributed %q, want audit_id or inherited", id, n.Argv, n.Attribution)
			}
			walk(n.Children)
		}
	}
	walk(d.Tree)
	if !slices.Contains(argvs, want) {
		t.Errorf("session %s: processes %q in its tree, want one running %q", id, argvs, want)
	}
	t.Logf("session %s (%s): %q", id, user, argvs)
}

// waitBridge waits until the apiserver calls the bridge: a dry-run
// ephemeral container on ns/pod comes back with the bridge's ID.
func waitBridge(t *testing.T, s *apiServer, ns, pod string) {
	t.Helper()
	ctx := context.Background()
	testutil.EventuallyNil(t, func() error {
		p, err := s.client.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
		if err != nil {
			return err
		}
		p.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{
			Name: "probe", Image: "example.invalid/probe:1", ImagePullPolicy: corev1.PullIfNotPresent,
			TerminationMessagePolicy: corev1.TerminationMessageReadFile}}}
		got, err := s.client.CoreV1().Pods(ns).UpdateEphemeralContainers(ctx, pod, p,
			metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return err
		}
		for _, e := range got.Spec.EphemeralContainers[0].Env {
			if e.Name == vocab.BridgeKey {
				return nil
			}
		}
		return errors.New("waiting for the apiserver to call the bridge")
	})
}

func createPod(t *testing.T, s *apiServer, p *corev1.Pod) {
	t.Helper()
	if _, err := s.client.CoreV1().Pods(p.Namespace).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating pod %s/%s: %v", p.Namespace, p.Name, err)
	}
}

// waitRBACFor waits until RBAC decides as the bindings say: alice and bob
// may exec into web-0, eve may not, the responder may use the agents'
// pod proxy.
func waitRBACFor(t *testing.T, s *apiServer) {
	t.Helper()
	exec := &authzv1.ResourceAttributes{Namespace: "shop", Verb: "create", Resource: "pods", Subresource: "exec", Name: "web-0"}
	proxy := &authzv1.ResourceAttributes{Namespace: "correlator", Verb: "get", Resource: "pods", Subresource: "proxy"}
	waitAccess(t, s, []access{
		{user: alice.name, groups: []string{"developers"}, res: exec, allow: true},
		{user: bob.name, groups: []string{"developers"}, res: exec, allow: true},
		{user: eve.name, groups: []string{"viewers"}, res: exec, allow: false},
		{user: responder.name, groups: []string{responder.groups}, res: proxy, allow: true},
	})
}
