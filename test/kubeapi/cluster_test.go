package kubeapi

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/execid/correlator/internal/testutil"
	"github.com/execid/correlator/pkg/api"
	"github.com/execid/correlator/pkg/cluster"
)

// The cluster the plugin is tried against: the apiserver, the shipped
// manifests, two nodes with an agent each, two shop pods, and the users.

// Users of the static token file.
var (
	// responder is in the group the responder roles are bound to.
	responder = apiUser{"responder", "responder-token-0123456789", "responders"}
	// outsider has no binding at all.
	outsider = apiUser{"outsider", "outsider-token-0123456789", ""}
	// lister may list pods (the ClusterRole) but not use the pod proxy
	// (the namespace Role is not bound).
	lister = apiUser{"lister", "lister-token-0123456789", ""}
	// proxier may list pods and use the pod proxy, but not read
	// correlator (/apis/correlator/v1): the agents must refuse it.
	proxier = apiUser{"proxier", "proxier-token-0123456789", ""}
)

// testCluster is the running cluster.
type testCluster struct {
	api            *apiServer
	agentA, agentB *agent
	// podA and podB are the agent pods' proxy addresses (podIP:port).
	podA, podB string
}

// startCluster brings everything up and waits until RBAC decides as the
// bindings say.
func startCluster(t *testing.T) *testCluster {
	t.Helper()
	start := time.Now()
	s := startAPIServer(t, []apiUser{responder, outsider, lister, proxier})
	t.Logf("kube-apiserver ready in %s", time.Since(start).Round(time.Millisecond))

	applyKustomization(t, s)
	bindResponders(t, s, responder.groups)
	bindClusterRole(t, s, "correlator-responder", lister.name)
	// proxier: the namespace Role (pods/proxy) and pod reads, but no
	// correlator-reader and no /apis/correlator/v1.
	createClusterRole(t, s, "pod-reader", rbacv1.PolicyRule{APIGroups: []string{""},
		Resources: []string{"pods", "nodes"}, Verbs: []string{"get", "list"}})
	bindClusterRole(t, s, "pod-reader", proxier.name)
	bindRole(t, s, "correlator", "correlator-responder", proxier.name)

	shippedAuthKubernetes(t, s)
	c := &testCluster{api: s}
	c.agentA = startAgent(t, s, "node-a", nodeA())
	c.agentB = startAgent(t, s, "node-b", nodeB())

	// The agents as the shipped DaemonSet runs them: its pod template,
	// one pod per node, the API on the port named "api".
	tmpl := agentTemplate(t)
	port := apiPort(t, tmpl)
	c.podA, c.podB = "192.0.2.10:"+port, "192.0.2.11:"+port
	s.egress.route(c.podA, c.agentA.addr)
	s.egress.route(c.podB, c.agentB.addr)
	for _, n := range []struct{ node, pod, ip string }{
		{"node-a", "correlator-8kq2m", "192.0.2.10"},
		{"node-b", "correlator-zt4vn", "192.0.2.11"},
	} {
		createNode(t, s, n.node)
		pod := &corev1.Pod{ObjectMeta: *tmpl.ObjectMeta.DeepCopy(), Spec: *tmpl.Spec.DeepCopy()}
		pod.Name, pod.Namespace = n.pod, "correlator"
		runPod(t, s, pod, n.node, n.ip)
	}

	createNamespace(t, s, "shop")
	createNamespace(t, s, "blog")
	for _, n := range []struct{ ns, pod, node, ip string }{
		{"shop", "web-0", "node-a", "192.0.2.20"}, {"shop", "web-1", "node-b", "192.0.2.21"},
		{"blog", "web-2", "node-a", "192.0.2.22"}, {"shop", "db-0", "node-b", "192.0.2.23"},
	} {
		runPod(t, s, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: n.pod, Namespace: n.ns, Labels: podLabels[n.ns+"/"+n.pod]},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "example.invalid/shop:1"}}},
		}, n.node, n.ip)
	}

	waitRBAC(t, s)
	t.Logf("cluster ready in %s", time.Since(start).Round(time.Millisecond))
	return c
}

// apiPort is the agent container's port named "api" (pkg/cluster's
// default), as the shipped DaemonSet declares it.
func apiPort(t *testing.T, tmpl corev1.PodTemplateSpec) string {
	t.Helper()
	for _, ct := range tmpl.Spec.Containers {
		for _, p := range ct.Ports {
			if p.Name == cluster.DefaultAgentPort {
				return strconv.Itoa(int(p.ContainerPort))
			}
		}
	}
	t.Fatalf("the DaemonSet declares no container port named %q", cluster.DefaultAgentPort)
	return ""
}

func createClusterRole(t *testing.T, s *apiServer, name string, rules ...rbacv1.PolicyRule) {
	t.Helper()
	if _, err := s.client.RbacV1().ClusterRoles().Create(context.Background(),
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating ClusterRole %s: %v", name, err)
	}
}

func bindRole(t *testing.T, s *apiServer, ns, role, user string) {
	t.Helper()
	if _, err := s.client.RbacV1().RoleBindings(ns).Create(context.Background(), &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role + "-" + user},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("binding Role %s/%s to %s: %v", ns, role, user, err)
	}
}

// access is one authorization question and the answer the bindings give.
type access struct {
	user   string
	groups []string
	res    *authzv1.ResourceAttributes
	allow  bool
}

// waitRBAC waits until the apiserver's RBAC authorizer has seen every
// binding: each question answers as the bindings say.
func waitRBAC(t *testing.T, s *apiServer) {
	t.Helper()
	proxy := &authzv1.ResourceAttributes{Namespace: "correlator", Verb: "get", Resource: "pods", Subresource: "proxy"}
	token := &authzv1.ResourceAttributes{Namespace: "correlator", Verb: "create", Resource: "serviceaccounts",
		Subresource: "token", Name: "correlator-reader"}
	list := &authzv1.ResourceAttributes{Namespace: "correlator", Verb: "list", Resource: "pods"}
	review := &authzv1.ResourceAttributes{Group: "authentication.k8s.io", Verb: "create", Resource: "tokenreviews"}
	reader := "system:serviceaccount:correlator:correlator-reader"
	agentSA := "system:serviceaccount:correlator:correlator"
	saGroups := []string{"system:serviceaccounts", "system:serviceaccounts:correlator"}
	read := new(api.ReadAccess())
	checks := []access{
		{user: responder.name, groups: []string{"responders"}, res: proxy, allow: true},
		{user: responder.name, groups: []string{"responders"}, res: token, allow: true},
		{user: responder.name, groups: []string{"responders"}, res: read, allow: true},
		{user: reader, groups: saGroups, res: read, allow: true},
		{user: agentSA, groups: saGroups, res: review, allow: true},
		{user: lister.name, res: list, allow: true},
		{user: lister.name, res: proxy, allow: false},
		{user: proxier.name, res: proxy, allow: true},
		{user: proxier.name, groups: []string{"system:authenticated"}, res: read, allow: false},
		{user: outsider.name, res: list, allow: false},
	}
	waitAccess(t, s, checks)
}

// waitAccess waits until each question answers as the bindings say.
func waitAccess(t *testing.T, s *apiServer, checks []access) {
	t.Helper()
	for _, c := range checks {
		testutil.EventuallyNil(t, func() error {
			sar := &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{User: c.user, Groups: c.groups,
				ResourceAttributes: c.res}}
			got, err := s.client.AuthorizationV1().SubjectAccessReviews().Create(context.Background(), sar, metav1.CreateOptions{})
			if err != nil {
				return fmt.Errorf("RBAC for %s (%+v): %w", c.user, c.res, err)
			}
			if got.Status.Allowed != c.allow {
				return fmt.Errorf("RBAC for %s (%+v): want allowed=%v, got %+v", c.user, c.res, c.allow, got.Status)
			}
			return nil
		})
	}
}

// accessReason is the apiserver's reason for its answer to whether user
// (in groups) may read the agents' API.
func accessReason(t *testing.T, s *apiServer, user string, groups []string) string {
	t.Helper()
	got, err := s.client.AuthorizationV1().SubjectAccessReviews().Create(context.Background(), &authzv1.SubjectAccessReview{
		Spec: authzv1.SubjectAccessReviewSpec{User: user, Groups: groups, ResourceAttributes: new(api.ReadAccess())},
	}, metav1.CreateOptions{})
	if err != nil {
		return err.Error()
	}
	return fmt.Sprintf("allowed=%v %s", got.Status.Allowed, got.Status.Reason)
}
