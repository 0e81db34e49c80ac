package deploy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/rs/zerolog"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/execid/correlator/internal/testutil"
	"github.com/execid/correlator/pkg/bridge"
	"github.com/execid/correlator/pkg/vocab"
)

const bridgeName = "correlator-bridge"

// renderBridge renders the chart with the bridge on and decodes it; the
// cert-manager objects (CRDs) come back as maps.
func renderBridge(t *testing.T, set ...string) ([]runtime.Object, []map[string]any) {
	t.Helper()
	args := []string{"--set", "bridge.enabled=true"}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	docs, err := Documents(render(t, args...))
	if err != nil {
		t.Fatal(err)
	}
	var objs []runtime.Object
	var crs []map[string]any
	for _, doc := range docs {
		if strings.Contains(string(doc), "apiVersion: cert-manager.io/") {
			var m map[string]any
			if err := yaml.UnmarshalStrict(doc, &m); err != nil {
				t.Fatal(err)
			}
			crs = append(crs, m)
			continue
		}
		o, err := decoder(t).Decode(doc)
		if err != nil {
			t.Fatal(err)
		}
		objs = append(objs, o)
	}
	return objs, crs
}

func TestChartBridge(t *testing.T) {
	objs, crs := renderBridge(t)
	if len(crs) != 0 {
		t.Errorf("cert-manager objects without bridge.tls.certManager: %v", crs)
	}
	for _, want := range []string{"ClusterRole/" + bridgeName, "ClusterRoleBinding/" + bridgeName, "Deployment/" + bridgeName,
		"MutatingWebhookConfiguration/" + bridgeName, "NetworkPolicy/" + bridgeName, "PodDisruptionBudget/" + bridgeName,
		"Secret/" + bridgeName + "-tls", "Service/" + bridgeName, "ServiceAccount/" + bridgeName} {
		if !slices.Contains(kinds(objs), want) {
			t.Errorf("bridge.enabled renders no %s", want)
		}
	}
	dep := only[*appsv1.Deployment](t, objs, bridgeName)
	wh := checkWebhook(t, objs, dep)
	checkBridgePod(t, dep, "--pod-lookup")

	// The generated CA vouches for the Secret's certificate under the
	// Service's name: serve it with the bridge and connect as the
	// apiserver would.
	sec := only[*corev1.Secret](t, objs, bridgeName+"-tls")
	if sec.Type != corev1.SecretTypeTLS || !slices.Equal(sec.Data["ca.crt"], wh.ClientConfig.CABundle) {
		t.Fatalf("Secret type %s, ca.crt differs from the caBundle", sec.Type)
	}
	serveAndDial(t, sec.Data["tls.crt"], sec.Data["tls.key"], wh.ClientConfig.CABundle, bridgeName+"."+namespace+".svc")

	role := only[*rbacv1.ClusterRole](t, objs, bridgeName)
	if want := []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get"}}}; !slices.EqualFunc(role.Rules, want, func(a, b rbacv1.PolicyRule) bool {
		return slices.Equal(a.APIGroups, b.APIGroups) && slices.Equal(a.Resources, b.Resources) && slices.Equal(a.Verbs, b.Verbs) && len(a.ResourceNames) == 0
	}) {
		t.Errorf("bridge role %+v, want only get on pods", role.Rules)
	}
	pdb := only[*policyv1.PodDisruptionBudget](t, objs, bridgeName)
	if pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.IntValue() != 1 || !selects(t, pdb.Spec.Selector, dep) {
		t.Errorf("PDB %+v does not keep one bridge pod", pdb.Spec)
	}
	np := only[*networkingv1.NetworkPolicy](t, objs, bridgeName)
	if !selects(t, &np.Spec.PodSelector, dep) || len(np.Spec.Ingress) == 0 || np.Spec.Ingress[0].Ports[0].Port.String() != "webhook" || len(np.Spec.Ingress[0].From) != 0 {
		t.Errorf("bridge network policy %+v: want the webhook port open to the apiserver", np.Spec)
	}
	agentSvc := only[*corev1.Service](t, objs, "correlator")
	if labels.SelectorFromSet(agentSvc.Spec.Selector).Matches(labels.Set(dep.Spec.Template.Labels)) {
		t.Error("the agent's Service selects the bridge pods")
	}
	cm := only[*corev1.ConfigMap](t, objs, "correlator")
	var cfg struct {
		Keys []string `json:"keys"`
	}
	if err := yaml.Unmarshal([]byte(cm.Data[AgentConfigKey]), &cfg); err != nil {
		t.Fatal(err)
	}
	if want := []string{vocab.AuditIDKey, vocab.SPOKey, vocab.BridgeKey}; !slices.Equal(cfg.Keys, want) {
		t.Errorf("agent keys %v, want %v", cfg.Keys, want)
	}
}

// checkWebhook checks the MutatingWebhookConfiguration against the
// bridge's Service and Deployment and returns its one webhook.
func checkWebhook(t *testing.T, objs []runtime.Object, dep *appsv1.Deployment) admissionregistrationv1.MutatingWebhook {
	t.Helper()
	mwc := only[*admissionregistrationv1.MutatingWebhookConfiguration](t, objs, bridgeName)
	if len(mwc.Webhooks) != 1 {
		t.Fatalf("%d webhooks", len(mwc.Webhooks))
	}
	wh := mwc.Webhooks[0]
	if wh.Name != vocab.BridgeWebhookName {
		t.Errorf("webhook name %q, want %q: the join reads the annotation under it", wh.Name, vocab.BridgeWebhookName)
	}
	if *wh.SideEffects != admissionregistrationv1.SideEffectClassNone || *wh.TimeoutSeconds > 5 ||
		*wh.ReinvocationPolicy != admissionregistrationv1.NeverReinvocationPolicy || !slices.Equal(wh.AdmissionReviewVersions, []string{"v1"}) {
		t.Errorf("webhook sideEffects %v timeout %v reinvocation %v versions %v", *wh.SideEffects, *wh.TimeoutSeconds, *wh.ReinvocationPolicy, wh.AdmissionReviewVersions)
	}
	// CONNECT's object is PodExecOptions: any object selector matches no exec.
	if wh.ObjectSelector != nil && (len(wh.ObjectSelector.MatchLabels) > 0 || len(wh.ObjectSelector.MatchExpressions) > 0) {
		t.Errorf("object selector %+v would skip every exec", wh.ObjectSelector)
	}
	ns, err := metav1.LabelSelectorAsSelector(wh.NamespaceSelector)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]bool{"kube-system": false, namespace: false, "shop": true} {
		if got := ns.Matches(labels.Set{"kubernetes.io/metadata.name": name}); got != want {
			t.Errorf("namespace %s sent to the bridge: %v, want %v", name, got, want)
		}
	}
	if ns.Matches(labels.Set{"kubernetes.io/metadata.name": "shop", "correlator.execid.io/bridge": "skip"}) {
		t.Error("a namespace labelled correlator.execid.io/bridge=skip is still sent")
	}
	got := map[string]admissionregistrationv1.OperationType{}
	for _, r := range wh.Rules {
		for _, res := range r.Resources {
			got[res] = r.Operations[0]
		}
	}
	for res, op := range map[string]admissionregistrationv1.OperationType{"pods/exec": "CONNECT", "pods/attach": "CONNECT", "pods/ephemeralcontainers": "UPDATE"} {
		if got[res] != op {
			t.Errorf("rule for %s: %q, want %s", res, got[res], op)
		}
	}
	svc := only[*corev1.Service](t, objs, bridgeName)
	ref := wh.ClientConfig.Service
	if ref == nil || ref.Name != svc.Name || ref.Namespace != namespace || *ref.Path != bridge.MutatePath || *ref.Port != svc.Spec.Ports[0].Port ||
		svc.Spec.Ports[0].TargetPort.String() != "webhook" || !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(dep.Spec.Template.Labels)) {
		t.Errorf("webhook service %+v does not reach the bridge's Service %+v", ref, svc.Spec)
	}
	return wh
}

// checkBridgePod: an unprivileged pod whose args are flags of
// `correlator bridge`, with the TLS files on the Secret's mount.
func checkBridgePod(t *testing.T, dep *appsv1.Deployment, want ...string) {
	t.Helper()
	if *dep.Spec.Replicas != 2 {
		t.Errorf("replicas %d, want 2", *dep.Spec.Replicas)
	}
	spec := dep.Spec.Template.Spec
	c := spec.Containers[0]
	sc := c.SecurityContext
	if spec.SecurityContext == nil || !*spec.SecurityContext.RunAsNonRoot || *sc.Privileged || *sc.AllowPrivilegeEscalation ||
		!*sc.ReadOnlyRootFilesystem || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || spec.HostPID || spec.HostNetwork {
		t.Errorf("bridge pod security %+v %+v", spec.SecurityContext, sc)
	}
	if c.Args[0] != "bridge" {
		t.Fatalf("args %v", c.Args)
	}
	args := strings.Join(c.Args, " ")
	for _, w := range append([]string{"--key=" + vocab.BridgeKey, "--tls-cert=/etc/correlator/bridge-tls/tls.crt", "--tls-key=/etc/correlator/bridge-tls/tls.key"}, want...) {
		if !strings.Contains(args, w) {
			t.Errorf("args %q lack %q", args, w)
		}
	}
	if m, ok := mountFor(c.VolumeMounts, "/etc/correlator/bridge-tls/tls.crt"); !ok || !m.ReadOnly {
		t.Errorf("TLS mount %+v", m)
	}
	if p := c.ReadinessProbe.HTTPGet; p.Scheme != corev1.URISchemeHTTPS || p.Port.String() != "webhook" {
		t.Errorf("readiness probe %+v", p)
	}
	h := string(correlatorHelp(t, "bridge"))
	for _, a := range c.Args[1:] {
		if flag, _, _ := strings.Cut(a, "="); !strings.Contains(h, " "+flag+" ") {
			t.Errorf("`correlator bridge` has no flag %s", flag)
		}
	}
}

func correlatorHelp(t *testing.T, sub string) []byte {
	t.Helper()
	out, err := exec.Command(correlatorBin(t), sub, "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("correlator %s --help: %v\n%s", sub, err, out)
	}
	return out
}

func selects(t *testing.T, sel *metav1.LabelSelector, dep *appsv1.Deployment) bool {
	t.Helper()
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		t.Fatal(err)
	}
	return !s.Empty() && s.Matches(labels.Set(dep.Spec.Template.Labels))
}

// serveAndDial serves the pair with the bridge's server and connects to
// it trusting only caBundle, under serverName.
func serveAndDial(t *testing.T, crt, key, caBundle []byte, serverName string) {
	t.Helper()
	dir := t.TempDir()
	cfg := bridge.Default()
	cfg.CertFile, cfg.KeyFile = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	for f, b := range map[string][]byte{cfg.CertFile: crt, cfg.KeyFile: key} {
		if err := os.WriteFile(f, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	mut, err := bridge.NewMutator(cfg.Key, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := bridge.NewServer(cfg, bridge.NewHandler(mut, cfg.MaxBodyBytes, zerolog.Nop(), nil), nil, zerolog.Nop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ctx, ln, nil) }()
	defer func() { cancel(); <-errc }()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caBundle) {
		t.Fatal("caBundle holds no PEM certificate")
	}
	testutil.EventuallyNil(t, func() error {
		conn, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{RootCAs: pool, ServerName: serverName, MinVersion: tls.VersionTLS12})
		if err == nil {
			conn.Close()
		}
		return err
	})
}

func TestChartBridgeOptions(t *testing.T) {
	// cert-manager: a Certificate into the mounted Secret, the CA injected.
	objs, crs := renderBridge(t, "bridge.tls.certManager.enabled=true", "bridge.failurePolicy=Fail",
		"bridge.attach=false", "bridge.podLookup=false", "bridge.key=MY_EXEC_ID")
	var cert map[string]any
	for _, cr := range crs {
		if cr["kind"] == "Certificate" {
			cert = cr
		}
	}
	if cert == nil || len(crs) != 2 {
		t.Fatalf("cert-manager objects %v: want a self-signed Issuer and a Certificate", crs)
	}
	spec := cert["spec"].(map[string]any)
	mwc := only[*admissionregistrationv1.MutatingWebhookConfiguration](t, objs, bridgeName)
	if got := mwc.Annotations["cert-manager.io/inject-ca-from"]; got != namespace+"/"+cert["metadata"].(map[string]any)["name"].(string) {
		t.Errorf("inject-ca-from %q", got)
	}
	wh := mwc.Webhooks[0]
	if len(wh.ClientConfig.CABundle) != 0 || *wh.FailurePolicy != admissionregistrationv1.Fail {
		t.Errorf("caBundle %d bytes, failurePolicy %v", len(wh.ClientConfig.CABundle), *wh.FailurePolicy)
	}
	for _, r := range wh.Rules {
		if slices.Contains(r.Resources, "pods/attach") {
			t.Error("pods/attach sent with bridge.attach=false")
		}
	}
	dep := only[*appsv1.Deployment](t, objs, bridgeName)
	vol := dep.Spec.Template.Spec.Volumes[0]
	if vol.Secret == nil || vol.Secret.SecretName != spec["secretName"] {
		t.Errorf("TLS volume %+v, Certificate writes %v", vol, spec["secretName"])
	}
	if !slices.Contains(spec["dnsNames"].([]any), any(bridgeName+"."+namespace+".svc")) {
		t.Errorf("certificate names %v", spec["dnsNames"])
	}
	args := strings.Join(dep.Spec.Template.Spec.Containers[0].Args, " ")
	if strings.Contains(args, "--pod-lookup") || !strings.Contains(args, "--key=MY_EXEC_ID") {
		t.Errorf("args %q", args)
	}
	for _, o := range objs {
		switch kindName(o) {
		case "ClusterRole/" + bridgeName, "Secret/" + bridgeName + "-tls":
			t.Errorf("%s rendered", kindName(o))
		}
	}
	if sa := only[*corev1.ServiceAccount](t, objs, bridgeName); *sa.AutomountServiceAccountToken {
		t.Error("the bridge calls no API without podLookup: no token")
	}

	// A Secret of one's own, with its CA.
	objs, _ = renderBridge(t, "bridge.tls.existingSecret=my-tls", "bridge.tls.caBundle=Q0E=")
	wh = only[*admissionregistrationv1.MutatingWebhookConfiguration](t, objs, bridgeName).Webhooks[0]
	dep = only[*appsv1.Deployment](t, objs, bridgeName)
	if string(wh.ClientConfig.CABundle) != "CA" || dep.Spec.Template.Spec.Volumes[0].Secret.SecretName != "my-tls" {
		t.Errorf("caBundle %q, volume %+v", wh.ClientConfig.CABundle, dep.Spec.Template.Spec.Volumes[0])
	}
}

func TestChartBridgeRefuses(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--set", "bridge.enabled=true,bridge.failurePolicy=Maybe"}, "must be Ignore or Fail"},
		{[]string{"--set", "bridge.enabled=true,bridge.tls.existingSecret=x"}, "needs bridge.tls.caBundle"},
	} {
		_, err := RenderChart(t.Context(), helmBin(t), chartDir, release, namespace, c.args...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: error %v, want one saying %q", c.args, err, c.want)
		}
	}
}
