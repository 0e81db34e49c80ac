package kubeapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
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

// The exec bridge against the real kube-apiserver: the chart's objects
// applied as rendered, `correlator bridge` called by the apiserver through
// its Service's clusterIP, the real kubectl, and a kubelet whose exec
// endpoint shows what the apiserver sent it.

var (
	// alice and bob may exec and debug in shop (the developers' Role).
	alice = apiUser{"alice", "alice-token-0123456789", "developers"}
	bob   = apiUser{"bob", "bob-token-0123456789", "developers"}
	// eve may read pods in shop but not exec.
	eve = apiUser{"eve", "eve-token-0123456789", "viewers"}
)

var (
	// annotationKey is the audit annotation the bridge's ID is stored under.
	annotationKey = vocab.BridgeWebhookName + "/" + vocab.BridgeKey
	uuidRE        = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
)

const nodeIP, kubeletPort = "192.0.2.1", 10250

// bridgeCluster is the running cluster.
type bridgeCluster struct {
	api      *apiServer
	kubelet  *kubelet
	bridge   *runningBridge
	auditLog string
}

func TestBridgeThroughKubeAPIServer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd and kube-apiserver")
	}
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Fatal("kubectl is not on PATH: `make deps` installs it (Debian package kubernetes-client), " +
			"or see https://kubernetes.io/docs/tasks/tools/")
	}
	c := startBridgeCluster(t)
	as := func(u apiUser) kubectlAs { return kubectlAs{bin: kubectl, kubeconfig: kubeconfig(t, c.api, u.name, u.token, "shop")} }

	var aliceID string
	t.Run("exec is rewritten and the ID is in the audit log", func(t *testing.T) {
		n := c.kubelet.count()
		mutations := c.bridge.metric(t, `correlator_bridge_mutations_total{kind="exec"}`)
		r := as(alice).must(t, "exec", "-n", "shop", "web-0", "-c", "app", "--", "/bin/cat", "/etc/hostname")
		aliceID = c.wantRewritten(t, n, r, "web-0", "/bin/cat", "/etc/hostname")
		// The apiserver reached the bridge through its Service's clusterIP
		// (the only way to the bridge's loopback port; the connection is
		// kept alive, so it may be waitWebhook's), and the bridge counted
		// the mutation.
		if c.api.egress.dials(c.bridge.serviceAddr) == 0 {
			t.Errorf("no connection to the bridge's Service %s through the egress", c.bridge.serviceAddr)
		}
		if got := c.bridge.metric(t, `correlator_bridge_mutations_total{kind="exec"}`); got != mutations+1 {
			t.Errorf("exec mutations %v, want %v", got, mutations+1)
		}

		ev := c.auditEvent(t, podEvent{alice.name, "shop", "web-0", "exec", auditv1.StageResponseComplete})
		// kubectl's exec is a WebSocket (GET, 101) that the apiserver
		// carries on to the kubelet.
		if ev.Verb != "get" && ev.Verb != "create" || ev.ResponseStatus == nil || ev.ResponseStatus.Code != 101 {
			t.Errorf("alice's audit event: verb %s, status %+v; want an upgraded exec (101)", ev.Verb, ev.ResponseStatus)
		}
		if got := ev.Annotations[annotationKey]; got != aliceID {
			t.Errorf("audit annotation %s = %q, want the ID the kubelet got, %q", annotationKey, got, aliceID)
		}
		// The audit log keeps the request as the user sent it: the
		// original URI, with the user's command and no rewrite.
		if !strings.Contains(ev.RequestURI, "command=%2Fbin%2Fcat&command=%2Fetc%2Fhostname") ||
			strings.Contains(ev.RequestURI, vocab.BridgeKey) || strings.Contains(ev.RequestURI, "command=env") {
			t.Errorf("audit requestURI %q: want the user's command only", ev.RequestURI)
		}
		// correlator's own parser, as the agent reads the file.
		rec := c.record(t, string(ev.AuditID))
		if rec.Annotations[annotationKey] != aliceID || rec.User.Username != alice.name ||
			!slices.Equal(rec.Command, []string{"/bin/cat", "/etc/hostname"}) || rec.Container != "app" || rec.Code != 101 ||
			rec.Namespace != "shop" || rec.Pod != "web-0" || rec.Subresource != auditlog.SubresourceExec || !rec.Complete() {
			t.Errorf("pkg/auditlog's record: %+v; want alice's /bin/cat /etc/hostname into shop/web-0 app, annotated %s", rec, aliceID)
		}
	})

	t.Run("every exec gets its own ID", func(t *testing.T) {
		n := c.kubelet.count()
		r := as(bob).must(t, "exec", "-n", "shop", "web-0", "-c", "app", "--", "/bin/id")
		bobID := c.wantRewritten(t, n, r, "web-0", "/bin/id")
		if bobID == aliceID || aliceID == "" {
			t.Errorf("bob's exec got ID %q, alice's %q: want two different IDs", bobID, aliceID)
		}
		ev := c.auditEvent(t, podEvent{bob.name, "shop", "web-0", "exec", auditv1.StageResponseComplete})
		if got := ev.Annotations[annotationKey]; got != bobID {
			t.Errorf("bob's audit annotation %q, want %q", got, bobID)
		}
	})

	t.Run("a caller's own ID is overwritten", func(t *testing.T) {
		n := c.kubelet.count()
		overwritten := c.bridge.metric(t, `correlator_bridge_caller_key_total{action="overwritten"}`)
		r := as(alice).must(t, "exec", "-n", "shop", "web-1", "-c", "app", "--",
			"env", vocab.BridgeKey+"=stolen", "/bin/sh", "-c", "echo forged")
		id := c.wantRewritten(t, n, r, "web-1", "env", vocab.BridgeKey+"=<id>", "/bin/sh", "-c", "echo forged")
		if strings.Contains(r.stdout, "stolen") {
			t.Errorf("the kubelet was sent the caller's ID: %s", r.stdout)
		}
		if got := c.bridge.metric(t, `correlator_bridge_caller_key_total{action="overwritten"}`); got != overwritten+1 {
			t.Errorf("caller keys overwritten %v, want %v", got, overwritten+1)
		}
		// Control: the request did carry "stolen"; the audit log shows it.
		ev := c.auditEvent(t, podEvent{alice.name, "shop", "web-1", "exec", auditv1.StageResponseComplete})
		rec := c.record(t, string(ev.AuditID))
		if ev.Annotations[annotationKey] != id || !slices.Contains(rec.Command, vocab.BridgeKey+"=stolen") {
			t.Errorf("audit: annotation %q (want %q), the user's command %q (want the forged key)",
				ev.Annotations[annotationKey], id, rec.Command)
		}
	})

	t.Run("a pod the bridge skips", func(t *testing.T) {
		n := c.kubelet.count()
		requests := c.bridge.metric(t, `correlator_bridge_requests_total{kind="exec"}`)
		skips := c.bridge.metric(t, `correlator_bridge_skips_total{reason="`+bridge.SkipAnnotated+`"}`)
		r := as(alice).must(t, "exec", "-n", "shop", "vault-0", "-c", "app", "--", "/bin/cat", "/etc/hostname")
		got := c.kubelet.all()[n:]
		if want := []string{"/bin/cat", "/etc/hostname"}; len(got) != 1 || !slices.Equal(got[0].Command, want) {
			t.Errorf("the kubelet got %+v, want %q unchanged\n%s", got, want, r)
		}
		ev := c.auditEvent(t, podEvent{alice.name, "shop", "vault-0", "exec", auditv1.StageResponseComplete})
		if v, ok := ev.Annotations[annotationKey]; ok {
			t.Errorf("a skipped exec's audit event carries %s=%q", annotationKey, v)
		}
		// Control: the bridge was asked, read the pod with its shipped
		// RBAC, and skipped it for the annotation.
		if got := c.bridge.metric(t, `correlator_bridge_requests_total{kind="exec"}`); got != requests+1 {
			t.Errorf("bridge exec requests %v, want %v", got, requests+1)
		}
		if got := c.bridge.metric(t, `correlator_bridge_skips_total{reason="`+bridge.SkipAnnotated+`"}`); got != skips+1 {
			t.Errorf("skips for the annotation %v, want %v", got, skips+1)
		}
		if got := c.bridge.metric(t, `correlator_bridge_errors_total{reason="`+bridge.ErrLookup+`"}`); got != 0 {
			t.Errorf("%v pod lookups failed: the shipped ClusterRole should allow them", got)
		}
	})

	t.Run("a user without pods/exec is refused before the bridge and the kubelet", func(t *testing.T) {
		n := c.kubelet.count()
		requests := c.bridge.metric(t, `correlator_bridge_requests_total{kind="exec"}`)
		// Control: eve is authenticated and may read the pod.
		as(eve).must(t, "get", "pod", "-n", "shop", "web-0", "-o", "name")
		r := as(eve).run(t, "exec", "-n", "shop", "web-0", "-c", "app", "--", "/bin/cat", "/etc/shadow")
		if r.code == 0 || !strings.Contains(r.stderr, `User "eve" cannot`) || !strings.Contains(r.stderr, `resource "pods/exec"`) {
			t.Errorf("eve's exec: want kubectl to fail with the apiserver's refusal\n%s", r)
		}
		if got := c.kubelet.all()[n:]; len(got) != 0 {
			t.Errorf("the kubelet got %+v from eve's refused exec", got)
		}
		if got := c.bridge.metric(t, `correlator_bridge_requests_total{kind="exec"}`); got != requests {
			t.Errorf("the bridge was asked %v times for eve's refused exec", got-requests)
		}
		// kubectl tries a WebSocket first and, refused, SPDY: every
		// attempt is a refusal in the audit log.
		evs := c.auditEvents(t, podEvent{eve.name, "shop", "web-0", "exec", auditv1.StageResponseComplete}, 1)
		for _, ev := range evs {
			if ev.ResponseStatus == nil || ev.ResponseStatus.Code != 403 || ev.Annotations[auditlog.AnnotationDecision] != "forbid" {
				t.Errorf("eve's audit event: status %+v, annotations %v; want 403 and decision forbid", ev.ResponseStatus, ev.Annotations)
			}
			if rec := c.record(t, string(ev.AuditID)); rec.Code != 403 || rec.Decision != "forbid" || rec.User.Username != eve.name ||
				rec.Annotations[annotationKey] != "" {
				t.Errorf("pkg/auditlog's record of eve's exec: %+v; want 403, forbid, no bridge ID", rec)
			}
		}
	})

	t.Run("kubectl debug: the ephemeral container carries the ID", func(t *testing.T) {
		n := c.kubelet.count()
		mutations := c.bridge.metric(t, `correlator_bridge_mutations_total{kind="ephemeral"}`)
		as(alice).must(t, "debug", "-n", "shop", "web-0", "--image=busybox:1.36", "-c", "debugger", "--target=app")
		pod, err := c.api.client.CoreV1().Pods("shop").Get(context.Background(), "web-0", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var id string
		for _, ec := range pod.Spec.EphemeralContainers {
			if ec.Name != "debugger" {
				continue
			}
			for _, e := range ec.Env {
				if e.Name == vocab.BridgeKey {
					id = e.Value
				}
			}
			if ec.TargetContainerName != "app" || ec.Image != "busybox:1.36" {
				t.Errorf("ephemeral container %+v: want busybox:1.36 targeting app", ec)
			}
		}
		if !uuidRE.MatchString(id) {
			t.Fatalf("ephemeral container debugger's %s = %q, want a UUID; containers %+v", vocab.BridgeKey, id, pod.Spec.EphemeralContainers)
		}
		ev := c.auditEvent(t, podEvent{alice.name, "shop", "web-0", "ephemeralcontainers", auditv1.StageResponseComplete})
		if got := ev.Annotations[annotationKey]; got != id || ev.Verb != "patch" || ev.Level != auditv1.LevelRequest {
			t.Errorf("the ephemeralcontainers audit event: %s at level %s, annotation %q; want kubectl's patch "+
				"at the policy's Request level and the container's ID %q", ev.Verb, ev.Level, got, id)
		}
		rec := c.record(t, string(ev.AuditID))
		if rec.Container != "debugger" || rec.Annotations[annotationKey] != id || rec.User.Username != alice.name ||
			rec.Subresource != auditlog.SubresourceEphemeralContainers {
			t.Errorf("pkg/auditlog's record of the debug: %+v; want alice's container debugger with ID %s", rec, id)
		}
		if got := c.bridge.metric(t, `correlator_bridge_mutations_total{kind="ephemeral"}`); got != mutations+1 {
			t.Errorf("ephemeral mutations %v, want %v", got, mutations+1)
		}
		if got := c.kubelet.all()[n:]; len(got) != 0 {
			t.Errorf("kubectl debug without -it attached: the kubelet got %+v", got)
		}
	})
}

// kubectlAs runs the real kubectl with one user's kubeconfig.
type kubectlAs struct{ bin, kubeconfig string }

func (k kubectlAs) run(t *testing.T, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, k.bin, append([]string{"--kubeconfig", k.kubeconfig}, args...)...)
	cmd.Env = []string{"HOME=" + t.TempDir(), "PATH=" + os.Getenv("PATH")}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := result{prog: "kubectl", args: args, stdout: stdout.String(), stderr: stderr.String()}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	case err != nil:
		t.Fatalf("running kubectl %v: %v", args, err)
	}
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
	app := corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "example.invalid/shop:1"}}}
	for i, p := range []*corev1.Pod{
		{ObjectMeta: metav1.ObjectMeta{Name: "web-0", Namespace: "shop"}, Spec: *app.DeepCopy()},
		{ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: "shop"}, Spec: *app.DeepCopy()},
		// No `env` in this image: the pod opts out of the bridge.
		{ObjectMeta: metav1.ObjectMeta{Name: "vault-0", Namespace: "shop",
			Annotations: map[string]string{bridge.SkipAnnotation: bridge.SkipAll}}, Spec: *app.DeepCopy()},
		{ObjectMeta: metav1.ObjectMeta{Name: "probe-0", Namespace: "shop"}, Spec: *app.DeepCopy()},
	} {
		runPod(t, s, p, "node-a", fmt.Sprintf("10.244.0.%d", 10+i))
	}

	ctx := context.Background()
	dev := rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list"}}
	if _, err := s.client.RbacV1().Roles("shop").Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "developer"},
		Rules: []rbacv1.PolicyRule{dev,
			{APIGroups: []string{""}, Resources: []string{"pods/exec"}, Verbs: []string{"create", "get"}},
			{APIGroups: []string{""}, Resources: []string{"pods/ephemeralcontainers"}, Verbs: []string{"patch", "update"}}}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.client.RbacV1().Roles("shop").Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "viewer"},
		Rules: []rbacv1.PolicyRule{dev}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for role, group := range map[string]string{"developer": "developers", "viewer": "viewers"} {
		if _, err := s.client.RbacV1().RoleBindings("shop").Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: role},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: group}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

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
	})
	waitWebhook(t, s)
	t.Logf("cluster with the bridge ready in %s", time.Since(start).Round(time.Millisecond))
	return &bridgeCluster{api: s, kubelet: k, bridge: b, auditLog: auditLog}
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
