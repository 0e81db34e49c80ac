package kubeapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"

	"github.com/execid/correlator/internal/testutil"
	"github.com/execid/correlator/pkg/auditlog"
	"github.com/execid/correlator/pkg/bridge"
	"github.com/execid/correlator/pkg/vocab"
)

// The bridge test's cluster and its checks: the real kubectl per user,
// what the fake kubelet ran, the audit log's events and records.

// bridgeCluster is the running cluster.
type bridgeCluster struct {
	api      *apiServer
	kubelet  *kubelet
	bridge   *runningBridge
	auditLog string
}

// kubectlAs runs the real kubectl with one user's kubeconfig.
type kubectlAs struct{ bin, kubeconfig string }

func (k kubectlAs) run(t *testing.T, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, k.bin, append([]string{"--kubeconfig", k.kubeconfig}, args...)...)
	cmd.Env = []string{"HOME=" + t.TempDir(), "PATH=" + os.Getenv("PATH")}
	r := runCommand(t, cmd, "kubectl", args)
	t.Logf("%s", r)
	return r
}

func (k kubectlAs) must(t *testing.T, args ...string) result {
	t.Helper()
	r := k.run(t, args...)
	if r.code != 0 {
		t.Fatalf("want exit 0:\n%s", r)
	}
	return r
}

// wantRewritten checks the one exec the kubelet got since n: into pod's
// app container, `env <key>=<uuid> want...` (a "<key>=<id>" in want
// stands for the same ID), printed by kubectl. It returns the ID.
func (c *bridgeCluster) wantRewritten(t *testing.T, n int, r result, pod string, want ...string) string {
	t.Helper()
	got := c.kubelet.all()[n:]
	if len(got) != 1 || got[0].Namespace != "shop" || got[0].Pod != pod || got[0].Container != "app" {
		t.Fatalf("the kubelet got %+v, want one exec into shop/%s app\n%s", got, pod, r)
	}
	cmd := got[0].Command
	if len(cmd) < 2 || cmd[0] != "env" || !strings.HasPrefix(cmd[1], vocab.BridgeKey+"=") {
		t.Fatalf("the kubelet ran %q, want env %s=<id> %q", cmd, vocab.BridgeKey, want)
	}
	id := strings.TrimPrefix(cmd[1], vocab.BridgeKey+"=")
	if !uuidRE.MatchString(id) {
		t.Errorf("the bridge's ID %q is not a random UUID", id)
	}
	full := append([]string{"env", vocab.BridgeKey + "=" + id}, want...)
	for i, w := range full {
		full[i] = strings.ReplaceAll(w, "<id>", id)
	}
	if !slices.Equal(cmd, full) {
		t.Errorf("the kubelet ran %q, want %q", cmd, full)
	}
	// kubectl printed what the kubelet ran.
	var printed []string
	if err := json.Unmarshal([]byte(r.stdout), &printed); err != nil || !slices.Equal(printed, cmd) {
		t.Errorf("kubectl printed %q (%v), want %q", r.stdout, err, cmd)
	}
	return id
}

// auditEvent waits for the one event q picks (ResponseComplete is written
// when the stream ends, which may be after kubectl exits).
func (c *bridgeCluster) auditEvent(t *testing.T, q podEvent) auditv1.Event {
	t.Helper()
	evs := c.auditEvents(t, q, 1)
	if len(evs) != 1 {
		t.Fatalf("the audit log holds %d events for %s, want 1: %+v", len(evs), q, evs)
	}
	return evs[0]
}

// auditEvents waits until q picks at least n events and returns them.
func (c *bridgeCluster) auditEvents(t *testing.T, q podEvent, n int) []auditv1.Event {
	t.Helper()
	var evs []auditv1.Event
	testutil.EventuallyNil(t, func() error {
		if evs = q.find(auditEvents(t, c.auditLog)); len(evs) < n {
			return fmt.Errorf("the audit log holds %d events for %s, want %d", len(evs), q, n)
		}
		return nil
	})
	return evs
}

// record is pkg/auditlog's record of the request id.
func (c *bridgeCluster) record(t *testing.T, id string) auditlog.ExecRecord {
	t.Helper()
	rec, ok := auditRecords(t, c.auditLog)[id]
	if !ok {
		t.Fatalf("pkg/auditlog found no record %s in kube-apiserver's audit log", id)
	}
	return rec
}

// startBridgeCluster: the apiserver with the audit log, a node whose
// kubelet is the fake one, the shop pods, the users' RBAC, and the bridge
// installed from the chart and called.
func startBridgeCluster(t *testing.T) *bridgeCluster {
	t.Helper()
	rendered := renderBridge(t)
	bin := buildCorrelator(t)
	start := time.Now()
	auditLog := filepath.Join(t.TempDir(), "audit.log")
	s := startAPIServer(t, []apiUser{alice, bob, eve}, auditFlags(t, auditLog)...)
	t.Logf("kube-apiserver ready in %s", time.Since(start).Round(time.Millisecond))

	k := startKubelet(t)
	s.egress.route(fmt.Sprintf("%s:%d", nodeIP, kubeletPort), k.addr)
	createKubeletNode(t, s, "node-a", nodeIP, kubeletPort)
	createNamespace(t, s, "shop")
	createNamespace(t, s, "infra")
	ctx := context.Background()
	ns, err := s.client.CoreV1().Namespaces().Get(ctx, "infra", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	key, value, _ := strings.Cut(skipNamespaceLabel, "=")
	ns.Labels[key] = value
	if _, err := s.client.CoreV1().Namespaces().Update(ctx, ns, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	app := corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "example.invalid/shop:1"}}}
	for i, p := range []*corev1.Pod{
		{ObjectMeta: metav1.ObjectMeta{Name: "web-0", Namespace: "shop"}, Spec: *app.DeepCopy()},
		{ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: "shop"}, Spec: *app.DeepCopy()},
		// No `env` in this image: the pod opts out of the bridge.
		{ObjectMeta: metav1.ObjectMeta{Name: "vault-0", Namespace: "shop",
			Annotations: map[string]string{bridge.SkipAnnotation: bridge.SkipAll}}, Spec: *app.DeepCopy()},
		{ObjectMeta: metav1.ObjectMeta{Name: "probe-0", Namespace: "shop"}, Spec: *app.DeepCopy()},
		{ObjectMeta: metav1.ObjectMeta{Name: "tool-0", Namespace: "infra"}, Spec: *app.DeepCopy()},
	} {
		runPod(t, s, p, "node-a", fmt.Sprintf("10.244.0.%d", 10+i))
	}

	createRoles(t, s, "shop")
	createRoles(t, s, "infra")

	b := installBridge(t, s, bin, rendered)
	execIn := func(verb string) *authzv1.ResourceAttributes {
		return &authzv1.ResourceAttributes{Namespace: "shop", Verb: verb, Resource: "pods", Subresource: "exec", Name: "web-0"}
	}
	getPod := &authzv1.ResourceAttributes{Namespace: "shop", Verb: "get", Resource: "pods", Name: "vault-0"}
	bridgeSA := "system:serviceaccount:" + bridgeNamespace + ":" + bridgeName
	waitAccess(t, s, []access{
		{user: alice.name, groups: []string{"developers"}, res: execIn("create"), allow: true},
		{user: bob.name, groups: []string{"developers"}, res: execIn("get"), allow: true},
		{user: alice.name, groups: []string{"developers"}, res: &authzv1.ResourceAttributes{Namespace: "shop",
			Verb: "patch", Resource: "pods", Subresource: "ephemeralcontainers", Name: "web-0"}, allow: true},
		{user: eve.name, groups: []string{"viewers"}, res: getPod, allow: true},
		{user: eve.name, groups: []string{"viewers"}, res: execIn("create"), allow: false},
		{user: bridgeSA, groups: []string{"system:serviceaccounts"}, res: getPod, allow: true},
		{user: alice.name, groups: []string{"developers"}, res: &authzv1.ResourceAttributes{Namespace: "infra",
			Verb: "create", Resource: "pods", Subresource: "exec", Name: "tool-0"}, allow: true},
	})
	waitWebhook(t, s)
	t.Logf("cluster with the bridge ready in %s", time.Since(start).Round(time.Millisecond))
	return &bridgeCluster{api: s, kubelet: k, bridge: b, auditLog: auditLog}
}

// createRoles makes ns's developer Role (pods, exec, debug) for the
// developers group and viewer Role (pods) for the viewers group.
func createRoles(t *testing.T, s *apiServer, ns string) {
	t.Helper()
	ctx := context.Background()
	dev := rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list"}}
	if _, err := s.client.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "developer"},
		Rules: []rbacv1.PolicyRule{dev,
			{APIGroups: []string{""}, Resources: []string{"pods/exec"}, Verbs: []string{"create", "get"}},
			{APIGroups: []string{""}, Resources: []string{"pods/ephemeralcontainers"}, Verbs: []string{"patch", "update"}}}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.client.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "viewer"},
		Rules: []rbacv1.PolicyRule{dev}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for role, group := range map[string]string{"developer": "developers", "viewer": "viewers"} {
		if _, err := s.client.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: role},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: group}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

}

// waitWebhook waits until the apiserver calls the bridge: a dry-run
// ephemeral container on probe-0 comes back with the ID in its env.
func waitWebhook(t *testing.T, s *apiServer) {
	t.Helper()
	ctx := context.Background()
	testutil.EventuallyNil(t, func() error {
		pod, err := s.client.CoreV1().Pods("shop").Get(ctx, "probe-0", metav1.GetOptions{})
		if err != nil {
			return err
		}
		pod.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{
			Name: "probe", Image: "example.invalid/probe:1", ImagePullPolicy: corev1.PullIfNotPresent,
			TerminationMessagePolicy: corev1.TerminationMessageReadFile}}}
		got, err := s.client.CoreV1().Pods("shop").UpdateEphemeralContainers(ctx, "probe-0", pod,
			metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return err
		}
		for _, e := range got.Spec.EphemeralContainers[0].Env {
			if e.Name == vocab.BridgeKey {
				return nil
			}
		}
		return errors.New("the apiserver does not call the bridge yet")
	})
}
