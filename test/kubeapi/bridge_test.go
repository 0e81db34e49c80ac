package kubeapi

import (
	"context"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"

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

// skipNamespaceLabel opts a namespace out (the chart's namespaceSelector).
const skipNamespaceLabel = "correlator.execid.io/bridge=skip"

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
	as := func(u apiUser) kubectlAs {
		return kubectlAs{bin: kubectl, kubeconfig: kubeconfig(t, c.api, u.name, u.token, "shop")}
	}

	var aliceID string
	t.Run("exec is rewritten and the ID is in the audit log", func(t *testing.T) {
		n := c.kubelet.count()
		mutations := c.bridge.metric(t, "correlator_bridge_mutations_total", "kind", "exec")
		r := as(alice).must(t, "exec", "-n", "shop", "web-0", "-c", "app", "--", "/bin/cat", "/etc/hostname")
		aliceID = c.wantRewritten(t, n, r, "web-0", "/bin/cat", "/etc/hostname")
		// The apiserver reached the bridge through its Service's clusterIP
		// (the only way to the bridge's loopback port; the connection is
		// kept alive, so it may be waitWebhook's), and the bridge counted
		// the mutation.
		if c.api.egress.dials(c.bridge.serviceAddr) == 0 {
			t.Errorf("no connection to the bridge's Service %s through the egress", c.bridge.serviceAddr)
		}
		if got := c.bridge.metric(t, "correlator_bridge_mutations_total", "kind", "exec"); got != mutations+1 {
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
		overwritten := c.bridge.metric(t, "correlator_bridge_caller_key_total", "action", "overwritten")
		r := as(alice).must(t, "exec", "-n", "shop", "web-1", "-c", "app", "--",
			"env", vocab.BridgeKey+"=stolen", "/bin/sh", "-c", "echo forged")
		id := c.wantRewritten(t, n, r, "web-1", "env", vocab.BridgeKey+"=<id>", "/bin/sh", "-c", "echo forged")
		if strings.Contains(r.stdout, "stolen") {
			t.Errorf("the kubelet was sent the caller's ID: %s", r.stdout)
		}
		if got := c.bridge.metric(t, "correlator_bridge_caller_key_total", "action", "overwritten"); got != overwritten+1 {
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
		requests := c.bridge.metric(t, "correlator_bridge_requests_total", "kind", "exec")
		skips := c.bridge.metric(t, "correlator_bridge_skips_total", "reason", bridge.SkipAnnotated)
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
		if got := c.bridge.metric(t, "correlator_bridge_requests_total", "kind", "exec"); got != requests+1 {
			t.Errorf("bridge exec requests %v, want %v", got, requests+1)
		}
		if got := c.bridge.metric(t, "correlator_bridge_skips_total", "reason", bridge.SkipAnnotated); got != skips+1 {
			t.Errorf("skips for the annotation %v, want %v", got, skips+1)
		}
		if got := c.bridge.metric(t, "correlator_bridge_errors_total", "reason", bridge.ErrLookup); got != 0 {
			t.Errorf("%v pod lookups failed: the shipped ClusterRole should allow them", got)
		}

		// A namespace labelled to opt out is never sent to the bridge
		// (the shipped namespaceSelector).
		n, requests = c.kubelet.count(), c.bridge.metric(t, "correlator_bridge_requests_total", "kind", "exec")
		r = as(alice).must(t, "exec", "-n", "infra", "tool-0", "-c", "app", "--", "/bin/uname", "-a")
		if got := c.kubelet.all()[n:]; len(got) != 1 || !slices.Equal(got[0].Command, []string{"/bin/uname", "-a"}) {
			t.Errorf("the kubelet got %+v, want /bin/uname -a unchanged\n%s", got, r)
		}
		if got := c.bridge.metric(t, "correlator_bridge_requests_total", "kind", "exec"); got != requests {
			t.Errorf("the bridge was asked %v times for an exec in a namespace labelled %s", got-requests, skipNamespaceLabel)
		}
		ev = c.auditEvent(t, podEvent{alice.name, "infra", "tool-0", "exec", auditv1.StageResponseComplete})
		if v, ok := ev.Annotations[annotationKey]; ok {
			t.Errorf("an opted-out namespace's exec carries %s=%q", annotationKey, v)
		}
	})

	t.Run("a user without pods/exec is refused before the bridge and the kubelet", func(t *testing.T) {
		n := c.kubelet.count()
		requests := c.bridge.metric(t, "correlator_bridge_requests_total", "kind", "exec")
		// Control: eve is authenticated and may read the pod.
		as(eve).must(t, "get", "pod", "-n", "shop", "web-0", "-o", "name")
		r := as(eve).run(t, "exec", "-n", "shop", "web-0", "-c", "app", "--", "/bin/cat", "/etc/shadow")
		if r.code == 0 || !strings.Contains(r.stderr, `User "eve" cannot`) || !strings.Contains(r.stderr, `resource "pods/exec"`) {
			t.Errorf("eve's exec: want kubectl to fail with the apiserver's refusal\n%s", r)
		}
		if got := c.kubelet.all()[n:]; len(got) != 0 {
			t.Errorf("the kubelet got %+v from eve's refused exec", got)
		}
		if got := c.bridge.metric(t, "correlator_bridge_requests_total", "kind", "exec"); got != requests {
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
		mutations := c.bridge.metric(t, "correlator_bridge_mutations_total", "kind", "ephemeral")
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
		if got := c.bridge.metric(t, "correlator_bridge_mutations_total", "kind", "ephemeral"); got != mutations+1 {
			t.Errorf("ephemeral mutations %v, want %v", got, mutations+1)
		}
		if got := c.kubelet.all()[n:]; len(got) != 0 {
			t.Errorf("kubectl debug without -it attached: the kubelet got %+v", got)
		}
	})
}
