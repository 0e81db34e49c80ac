//go:build e2ecluster

package kubeapi

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/execid/correlator/deploy"
	"github.com/execid/correlator/internal/nodeharness"
	"github.com/execid/correlator/internal/ociimage"
	"github.com/execid/correlator/internal/testutil"
)

// The agent as users install it: the chart rendered (helm template),
// every object created through the API, and the DaemonSet's pod made as
// its controller would make it (no controller-manager runs here): from
// the template, with nodeName, the owner reference and the generation
// label. The kubelet starts it from the offline image.

// chartAgent is the chart's agent, rendered for the node.
type chartAgent struct {
	objs []*unstructured.Unstructured
	ds   appsv1.DaemonSet
	// token is the agent's API token (the chart's Secret): the audit
	// webhook's bearer token.
	token string
	port  int
	// tlsCert and tlsKey serve the agent's API (the chart's
	// tls.existingSecret): kube-apiserver's webhook client sends its
	// kubeconfig's token only over TLS. client trusts tlsCert.
	tlsCert, tlsKey []byte
	client          *http.Client
	// pinPath is where the agents pin their probes (agent.config.pin-path).
	pinPath string
}

// agentTLSSecret is the kubernetes.io/tls Secret the agent serves with.
const agentTLSSecret = "correlator-agent-tls"

// renderAgent renders the chart for node: the offline image (never
// pulled), the node's CRI socket, the API on a free host port (the pod
// is host-network) over TLS for nodeIP and loopback, a pin path, state
// and the audit log under dir, Kubernetes auth on (the plugin needs it),
// no uninstall hook (no Job controller runs), the bridge on.
func renderAgent(t *testing.T, node *nodeharness.Node, nodeIP, auditLog, dir string, set ...string) *chartAgent {
	t.Helper()
	a := &chartAgent{port: freePort(t), pinPath: filepath.Join(testutil.BPFFSPath, "correlator-e2e-"+testutil.RandomUUID()[:8])}
	a.tlsCert, a.tlsKey = selfSignedServing(t, "correlator-agent", net.ParseIP(nodeIP), net.IPv4(127, 0, 0, 1))
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(a.tlsCert)
	a.client = &http.Client{Timeout: 30 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	sep := strings.LastIndex(ociimage.CorrelatorRef, ":")
	args := []string{
		"--set", "image.repository=" + ociimage.CorrelatorRef[:sep], "--set", "image.tag=" + ociimage.CorrelatorRef[sep+1:],
		"--set", "image.pullPolicy=Never",
		"--set", "criSocket=" + node.Socket,
		"--set", "agent.config.listen=0.0.0.0:" + strconv.Itoa(a.port),
		"--set", "agent.config.pin-path=" + a.pinPath,
		"--set", "hostPaths.state=" + filepath.Join(dir, "state"),
		"--set", "audit.logHostPath=" + filepath.Dir(auditLog),
		"--set", "audit.logFiles={" + auditLog + "}",
		"--set", "auth.kubernetes=true",
		"--set", "tls.existingSecret=" + agentTLSSecret,
		"--set", "uninstall.enabled=false",
		// The bridge on, so that the agent's keys hold the bridge's; its
		// own objects come from renderBridge (installBridge runs it).
		"--set", "bridge.enabled=true",
	}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	ctx := context.Background()
	tools, err := deploy.ToolDir()
	if err != nil {
		t.Fatal(err)
	}
	helm, err := deploy.EnsureHelm(ctx, tools)
	if err != nil {
		t.Fatal(err)
	}
	out, err := deploy.RenderChart(ctx, helm, filepath.Join("..", "..", "deploy", "helm", "correlator"),
		"correlator", "correlator", args...)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range decodeYAML(t, "the rendered chart", out) {
		if strings.HasPrefix(u.GetName(), bridgeName) {
			continue
		}
		a.objs = append(a.objs, u)
		switch u.GetKind() {
		case "DaemonSet":
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &a.ds); err != nil {
				t.Fatalf("decoding the DaemonSet: %v", err)
			}
		case "Secret":
			enc, _, _ := unstructured.NestedString(u.Object, "data", "token")
			tok, err := base64.StdEncoding.DecodeString(enc)
			if err != nil {
				t.Fatalf("decoding Secret %s: %v", u.GetName(), err)
			}
			if len(tok) > 0 {
				a.token = strings.TrimSpace(string(tok))
			}
		}
	}
	if a.ds.Name == "" || a.token == "" {
		t.Fatalf("the chart rendered no DaemonSet or no token Secret (%d objects)", len(a.objs))
	}
	return a
}

// webhookURL is the audit webhook endpoint the chart documents.
func (a *chartAgent) webhookURL(ip string) string {
	return fmt.Sprintf("https://%s:%d/api/v1/audit/webhook", ip, a.port)
}

// metric reads the counter name{label=value} from the agent's /metrics
// (the pod is host-network: the node's loopback reaches it).
func (a *chartAgent) metric(t *testing.T, name, label, value string) float64 {
	t.Helper()
	return scrapeMetric(t, a.client, fmt.Sprintf("https://127.0.0.1:%d/metrics", a.port), name, label, value)
}

// install creates the chart's objects, then the DaemonSet's pod on the
// node, and waits until the kubelet runs it and it is ready. The pod is
// host-network (no CNI here) and reaches the apiserver at its loopback
// address in place of the kubernetes Service (no kube-proxy here).
func (c *realCluster) installAgent(t *testing.T, a *chartAgent) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	if _, err := c.api.client.CoreV1().Secrets(a.ds.Namespace).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: agentTLSSecret}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{corev1.TLSCertKey: a.tlsCert, corev1.TLSPrivateKeyKey: a.tlsKey},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating the agent's TLS Secret: %v", err)
	}
	createObjects(t, c.api, a.objs)
	ds, err := c.api.client.AppsV1().DaemonSets(a.ds.Namespace).Get(ctx, a.ds.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("reading the DaemonSet: %v", err)
	}
	// The apiserver dials the pod's (the node's) address through the
	// egress; so does its audit webhook, when it takes the egress.
	target := "127.0.0.1:" + strconv.Itoa(a.port)
	c.api.egress.route(c.kubelet.ip+":"+strconv.Itoa(a.port), target)
	c.api.egress.route(target, target)
	return c.runDaemonPod(t, ds)
}

// runDaemonPod creates ds's pod on the node as the DaemonSet controller
// would, and waits until it is ready.
func (c *realCluster) runDaemonPod(t *testing.T, ds *appsv1.DaemonSet) *corev1.Pod {
	t.Helper()
	tmpl := ds.Spec.Template.DeepCopy()
	yes := true
	pod := &corev1.Pod{ObjectMeta: tmpl.ObjectMeta, Spec: tmpl.Spec}
	pod.Namespace, pod.GenerateName = ds.Namespace, ds.Name+"-"
	if pod.Labels == nil {
		pod.Labels = map[string]string{}
	}
	pod.Labels["pod-template-generation"] = strconv.FormatInt(ds.Generation, 10)
	pod.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: ds.Name,
		UID: ds.UID, Controller: &yes, BlockOwnerDeletion: &yes}}
	pod.Spec.NodeName, pod.Spec.HostNetwork = c.kubelet.node, true
	pod.Spec.DNSPolicy = corev1.DNSClusterFirstWithHostNet
	_, port, _ := strings.Cut(strings.TrimPrefix(c.api.admin.Host, "https://"), ":")
	host := c.servingHost
	for i := range pod.Spec.Containers {
		pod.Spec.Containers[i].Env = append(pod.Spec.Containers[i].Env,
			corev1.EnvVar{Name: "KUBERNETES_SERVICE_HOST", Value: host},
			corev1.EnvVar{Name: "KUBERNETES_SERVICE_PORT", Value: port})
	}
	created, err := c.api.client.CoreV1().Pods(ds.Namespace).Create(context.Background(), pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating the DaemonSet's pod: %v", err)
	}
	// The log while the pod is there (containerd removes it with the pod).
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("agent %s log (tail):\n%s", created.Name, tail(c.containerLog(t, ds.Namespace, created.Name), 12000))
		}
	})
	return c.waitRunning(t, ds.Namespace, created.Name)
}
