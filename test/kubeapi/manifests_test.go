package kubeapi

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"

	"github.com/execid/correlator/deploy"
)

// The shipped manifests, applied as they are to the real apiserver.

// deployDir is deploy/kubernetes from this module's directory.
var deployDir = filepath.Join("..", "..", "deploy", "kubernetes")

// decodeDocs reads every YAML document of a manifest file.
func decodeDocs(t *testing.T, path string) []*unstructured.Unstructured {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading %s: %v", path, err)
	}
	return decodeYAML(t, path, b)
}

// decodeYAML reads every YAML document of b (named path in errors).
func decodeYAML(t *testing.T, path string, b []byte) []*unstructured.Unstructured {
	t.Helper()
	dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
	var out []*unstructured.Unstructured
	for {
		u := &unstructured.Unstructured{}
		err := dec.Decode(&u.Object)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("decoding %s: %v", path, err)
		}
		if len(u.Object) > 0 {
			out = append(out, u)
		}
	}
}

// applyKustomization creates every object of deploy/kubernetes in the
// kustomization's order (no controller runs, so the DaemonSet makes no
// pods: agentPod makes them from its template).
func applyKustomization(t *testing.T, s *apiServer) {
	t.Helper()
	var k struct {
		Resources []string `json:"resources"`
	}
	b, err := os.ReadFile(filepath.Join(deployDir, "kustomization.yaml"))
	if err != nil {
		t.Fatalf("reading the kustomization: %v", err)
	}
	if err := yaml.Unmarshal(b, &k); err != nil {
		t.Fatalf("decoding the kustomization: %v", err)
	}
	var objs []*unstructured.Unstructured
	for _, file := range k.Resources {
		objs = append(objs, decodeDocs(t, filepath.Join(deployDir, file))...)
	}
	createObjects(t, s, objs)
}

// createObjects creates objs in order through the dynamic client, as
// `kubectl create -f` would.
func createObjects(t *testing.T, s *apiServer, objs []*unstructured.Unstructured) {
	t.Helper()
	dyn, err := dynamic.NewForConfig(s.admin)
	if err != nil {
		t.Fatalf("building the dynamic client: %v", err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(s.client.Discovery()))
	ctx := context.Background()
	for _, u := range objs {
		gvk := u.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			t.Fatalf("mapping %s: %v", gvk, err)
		}
		var ri dynamic.ResourceInterface = dyn.Resource(m.Resource)
		if u.GetNamespace() != "" {
			ri = dyn.Resource(m.Resource).Namespace(u.GetNamespace())
		}
		if _, err := ri.Create(ctx, u, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating %s %s: %v", gvk.Kind, u.GetName(), err)
		}
	}
}

// bindResponders binds the responder roles to group, as docs/kubectl.md
// says (kubectl create clusterrolebinding / rolebinding).
func bindResponders(t *testing.T, s *apiServer, group string) {
	t.Helper()
	ctx := context.Background()
	subj := []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: group}}
	role := func(kind string) rbacv1.RoleRef {
		return rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: kind, Name: "correlator-responder"}
	}
	name := metav1.ObjectMeta{Name: "correlator-responder-" + group}
	if _, err := s.client.RbacV1().ClusterRoleBindings().Create(ctx,
		&rbacv1.ClusterRoleBinding{ObjectMeta: name, RoleRef: role("ClusterRole"), Subjects: subj}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("binding ClusterRole correlator-responder: %v", err)
	}
	if _, err := s.client.RbacV1().RoleBindings("correlator").Create(ctx,
		&rbacv1.RoleBinding{ObjectMeta: name, RoleRef: role("Role"), Subjects: subj}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("binding Role correlator-responder: %v", err)
	}
}

// bindClusterRole binds an existing ClusterRole to user alone.
func bindClusterRole(t *testing.T, s *apiServer, role, user string) {
	t.Helper()
	if _, err := s.client.RbacV1().ClusterRoleBindings().Create(context.Background(), &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role + "-" + user},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("binding ClusterRole %s to %s: %v", role, user, err)
	}
}

// shippedAuthKubernetes reads the agents' config as applied (the shipped
// ConfigMap, from the apiserver) and fails unless it accepts Kubernetes
// tokens: the agents here review tokens because the shipped config says
// so, not because the test turns it on.
func shippedAuthKubernetes(t *testing.T, s *apiServer) {
	t.Helper()
	cm, err := s.client.CoreV1().ConfigMaps("correlator").Get(context.Background(), "correlator", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("reading the applied ConfigMap: %v", err)
	}
	var cfg map[string]any
	if err := yaml.Unmarshal([]byte(cm.Data[deploy.AgentConfigKey]), &cfg); err != nil {
		t.Fatalf("decoding the applied agent config: %v", err)
	}
	if cfg["auth-kubernetes"] != true {
		t.Fatalf("deploy/kubernetes's agent config has auth-kubernetes %#v, want true: "+
			"a default install would refuse kubectl correlator's tokens", cfg["auth-kubernetes"])
	}
}

// agentTemplate is the shipped DaemonSet's pod template.
func agentTemplate(t *testing.T) corev1.PodTemplateSpec {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(deployDir, "daemonset.yaml"))
	if err != nil {
		t.Fatalf("reading the DaemonSet: %v", err)
	}
	var ds appsv1.DaemonSet
	if err := yaml.Unmarshal(b, &ds); err != nil {
		t.Fatalf("decoding the DaemonSet: %v", err)
	}
	return ds.Spec.Template
}

// runPod creates pod on node and marks it running and ready at ip, as a
// kubelet would.
func runPod(t *testing.T, s *apiServer, pod *corev1.Pod, node, ip string) {
	t.Helper()
	ctx := context.Background()
	pod.Spec.NodeName = node
	p, err := s.client.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating pod %s/%s: %v", pod.Namespace, pod.Name, err)
	}
	p.Status.Phase = corev1.PodRunning
	p.Status.PodIP, p.Status.PodIPs = ip, []corev1.PodIP{{IP: ip}}
	p.Status.HostIP, p.Status.HostIPs = "192.0.2.1", []corev1.HostIP{{IP: "192.0.2.1"}}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	if _, err := s.client.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("marking pod %s/%s running at %s: %v", pod.Namespace, pod.Name, ip, err)
	}
}

// createNamespace creates ns and its default service account (no
// controller-manager runs to make it, and pods need it).
func createNamespace(t *testing.T, s *apiServer, ns string) {
	t.Helper()
	ctx := context.Background()
	if _, err := s.client.CoreV1().Namespaces().Create(ctx,
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating namespace %s: %v", ns, err)
	}
	if _, err := s.client.CoreV1().ServiceAccounts(ns).Create(ctx,
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating serviceaccount %s/default: %v", ns, err)
	}
}

// createNode registers a node (no kubelet behind it).
func createNode(t *testing.T, s *apiServer, name string) {
	t.Helper()
	if _, err := s.client.CoreV1().Nodes().Create(context.Background(),
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating node %s: %v", name, err)
	}
}
