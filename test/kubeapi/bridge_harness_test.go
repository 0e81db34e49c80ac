package kubeapi

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/execid/correlator/deploy"
	"github.com/execid/correlator/internal/testutil"
)

// The exec bridge as the Helm chart ships it (bridge.enabled=true, the
// chart's own CA), applied through the API, and `correlator bridge` run
// with the rendered Deployment's arguments and the rendered Secret's
// certificate, as its ServiceAccount.

const (
	bridgeNamespace = "correlator"
	bridgeName      = "correlator-bridge"
)

// renderedBridge is the chart's bridge objects, as rendered.
type renderedBridge struct {
	objs    []*unstructured.Unstructured
	dep     appsv1.Deployment
	secret  corev1.Secret
	webhook admissionregistrationv1.MutatingWebhookConfiguration
}

// renderBridge renders deploy/helm/correlator with the bridge on (the
// defaults otherwise: a generated CA, podLookup, failurePolicy Ignore)
// and keeps the bridge's objects.
func renderBridge(t *testing.T) renderedBridge {
	t.Helper()
	ctx := context.Background()
	dir, err := deploy.ToolDir()
	if err != nil {
		t.Fatal(err)
	}
	helm, err := deploy.EnsureHelm(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	out, err := deploy.RenderChart(ctx, helm, filepath.Join("..", "..", "deploy", "helm", "correlator"),
		"correlator", bridgeNamespace, "--set", "bridge.enabled=true")
	if err != nil {
		t.Fatal(err)
	}
	var r renderedBridge
	for _, u := range decodeYAML(t, "the rendered chart", out) {
		if !strings.HasPrefix(u.GetName(), bridgeName) {
			continue
		}
		r.objs = append(r.objs, u)
		var into any
		switch u.GetKind() {
		case "Deployment":
			into = &r.dep
		case "Secret":
			into = &r.secret
		case "MutatingWebhookConfiguration":
			into = &r.webhook
		default:
			continue
		}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, into); err != nil {
			t.Fatalf("decoding %s %s: %v", u.GetKind(), u.GetName(), err)
		}
	}
	if r.dep.Name == "" || r.secret.Name == "" || r.webhook.Name == "" || len(r.webhook.Webhooks) != 1 {
		t.Fatalf("the chart rendered no bridge Deployment, Secret or webhook: %d objects", len(r.objs))
	}
	return r
}

// runningBridge is `correlator bridge` on loopback.
type runningBridge struct {
	// addr is the webhook's HTTPS address, metrics the plain-HTTP one.
	addr, metrics string
	// serviceAddr is the Service's clusterIP:port the apiserver dials.
	serviceAddr string
	log         *syncBuffer
}

// syncBuffer collects a process's output.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// installBridge creates the bridge's rendered objects, runs the binary
// with the Deployment's arguments (addresses and mounted paths swapped
// for local ones, plus --kubeconfig with a token of its ServiceAccount in
// place of the in-cluster one), waits until it is ready and routes the
// Service's clusterIP through the egress proxy to it.
func installBridge(t *testing.T, s *apiServer, bin string, r renderedBridge) *runningBridge {
	t.Helper()
	ctx := context.Background()
	createNamespace(t, s, bridgeNamespace)
	createObjects(t, s, r.objs)

	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	writeFile(t, certFile, string(r.secret.Data["tls.crt"]))
	writeFile(t, keyFile, string(r.secret.Data["tls.key"]))
	tr, err := s.client.CoreV1().ServiceAccounts(bridgeNamespace).CreateToken(ctx,
		r.dep.Spec.Template.Spec.ServiceAccountName, &authnv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("minting the bridge's service account token: %v", err)
	}
	kc := kubeconfig(t, s, "bridge", tr.Status.Token, bridgeNamespace)

	b := &runningBridge{addr: fmt.Sprintf("127.0.0.1:%d", freePort(t)),
		metrics: fmt.Sprintf("127.0.0.1:%d", freePort(t)), log: &syncBuffer{}}
	args := bridgeArgs(t, r.dep, map[string]string{"--listen": b.addr, "--metrics-listen": b.metrics,
		"--tls-cert": certFile, "--tls-key": keyFile})
	args = append(args, "--kubeconfig="+kc)
	t.Logf("correlator %s", strings.Join(args, " "))
	cmd := exec.Command(bin, args...)
	cmd.Env = []string{"HOME=" + t.TempDir(), "PATH=" + os.Getenv("PATH")}
	cmd.Stdout, cmd.Stderr = b.log, b.log
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting correlator bridge: %v", err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("correlator bridge's log:\n%s", b.log.String())
		}
	})

	// Ready as the Deployment's readinessProbe sees it, with the
	// certificate checked as the apiserver checks it: the caBundle and
	// the Service's DNS name.
	wh := r.webhook.Webhooks[0]
	svc := wh.ClientConfig.Service
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(wh.ClientConfig.CABundle) {
		t.Fatal("the webhook's caBundle holds no certificate")
	}
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs: pool, ServerName: svc.Name + "." + svc.Namespace + ".svc"}}}
	testutil.EventuallyNil(t, func() error {
		select {
		case <-exited:
			t.Fatalf("correlator bridge exited:\n%s", b.log.String())
		default:
		}
		resp, err := client.Get("https://" + b.addr + "/readyz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("readyz: %s", resp.Status)
		}
		return nil
	})

	// kube-apiserver resolves a webhook Service to its clusterIP and dials
	// it through the "cluster" egress.
	created, err := s.client.CoreV1().Services(svc.Namespace).Get(ctx, svc.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("reading the bridge's Service: %v", err)
	}
	if created.Spec.ClusterIP == "" || created.Spec.ClusterIP == corev1.ClusterIPNone || svc.Port == nil {
		t.Fatalf("the bridge's Service has clusterIP %q, the webhook port %v", created.Spec.ClusterIP, svc.Port)
	}
	b.serviceAddr = created.Spec.ClusterIP + ":" + strconv.Itoa(int(*svc.Port))
	s.egress.route(b.serviceAddr, b.addr)
	return b
}

// bridgeArgs is the Deployment's container args with the flags in swap
// given new values; every one of them must be there.
func bridgeArgs(t *testing.T, dep appsv1.Deployment, swap map[string]string) []string {
	t.Helper()
	cs := dep.Spec.Template.Spec.Containers
	if len(cs) != 1 || len(cs[0].Args) == 0 || cs[0].Args[0] != "bridge" || len(cs[0].Command) != 0 {
		t.Fatalf("the bridge Deployment's container: want one running `correlator bridge ...`, got %+v", cs)
	}
	var out []string
	seen := map[string]bool{}
	for _, a := range cs[0].Args {
		name, _, _ := strings.Cut(a, "=")
		if v, ok := swap[name]; ok {
			a, seen[name] = name+"="+v, true
		}
		out = append(out, a)
	}
	for name := range swap {
		if !seen[name] {
			t.Fatalf("the bridge Deployment passes no %s: %q", name, cs[0].Args)
		}
	}
	return out
}

// metric reads the counter name{label=value} from the bridge's /metrics.
func (b *runningBridge) metric(t *testing.T, name, label, value string) float64 {
	t.Helper()
	return scrapeMetric(t, http.DefaultClient, "http://"+b.metrics+"/metrics", name, label, value)
}

// scrapeMetric reads the counter or gauge name{label=value} (label
// empty: the unlabelled series) from a /metrics page with the Prometheus
// text parser; absent is 0, a missing family fails.
func scrapeMetric(t *testing.T, client *http.Client, url, name, label, value string) float64 {
	t.Helper()
	resp, err := client.Get(url)
	if err != nil {
		t.Fatalf("scraping %s: %v", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("scraping %s: %s", url, resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parsing the metrics of %s: %v", url, err)
	}
	f, ok := families[name]
	if !ok {
		t.Fatalf("%s exposes no %s", url, name)
	}
	for _, m := range f.GetMetric() {
		match := label == "" && len(m.GetLabel()) == 0
		for _, l := range m.GetLabel() {
			match = match || l.GetName() == label && l.GetValue() == value
		}
		if match {
			return m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return 0
}
