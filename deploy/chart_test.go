package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"
)

func TestChartDefaults(t *testing.T) {
	objs := renderObjects(t)
	want := []string{
		"ClusterRole/correlator-agent", "ClusterRole/correlator-reader", "ClusterRole/correlator-responder",
		"ClusterRoleBinding/correlator-agent", "ClusterRoleBinding/correlator-reader",
		"ConfigMap/correlator", "DaemonSet/correlator", "Job/correlator-uninstall", "NetworkPolicy/correlator",
		"PriorityClass/correlator-node-agent", "Role/correlator-responder", "Secret/correlator-token", "Service/correlator",
		"ServiceAccount/correlator", "ServiceAccount/correlator-reader",
	}
	if got := kinds(objs); !slices.Equal(got, want) {
		t.Fatalf("objects\n got %v\nwant %v", got, want)
	}
	ds := only[*appsv1.DaemonSet](t, objs, "correlator")
	checkAgentPod(t, ds)
	checkRBAC(t, objs)
	checkNetwork(t, objs, ds)

	cm := only[*corev1.ConfigMap](t, objs, "correlator")
	checkConfigPaths(t, []byte(cm.Data[AgentConfigKey]), ds.Spec.Template.Spec.Containers[0].VolumeMounts)
	checkServesPlugin(t, []byte(cm.Data[AgentConfigKey]), ds)
	sec := only[*corev1.Secret](t, objs, "correlator-token")
	if len(sec.Data["token"]) < 32 {
		t.Errorf("generated token is %d bytes, want at least 32", len(sec.Data["token"]))
	}
	for _, v := range ds.Spec.Template.Spec.Volumes {
		if v.Name == "token" && (v.Secret == nil || v.Secret.SecretName != sec.Name) {
			t.Errorf("token volume %+v does not mount Secret %s", v, sec.Name)
		}
	}
	pc := only[*schedulingv1.PriorityClass](t, objs, "correlator-node-agent")
	if pc.Value <= 0 || pc.Value >= 1e9 || pc.GlobalDefault {
		t.Errorf("PriorityClass value %d globalDefault %v: want a positive user-range value, not the default", pc.Value, pc.GlobalDefault)
	}
	if ds.Spec.Template.Annotations[checksumAn] == "" {
		t.Error("no config checksum annotation: a config change would not roll the agents")
	}
	checkUninstallHook(t, objs, ds)
}

// checkServesPlugin: a default install answers `kubectl correlator`. The
// agent accepts Kubernetes tokens (TokenReview, SubjectAccessReview: the
// agent ClusterRole, checked by checkRBAC) with its service account's
// token mounted.
func checkServesPlugin(t *testing.T, config []byte, ds *appsv1.DaemonSet) {
	t.Helper()
	var cfg map[string]any
	if err := yaml.Unmarshal(config, &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg["auth-kubernetes"] != true {
		t.Errorf("config auth-kubernetes = %#v, want true: kubectl correlator's tokens would be refused", cfg["auth-kubernetes"])
	}
	if a := ds.Spec.Template.Spec.AutomountServiceAccountToken; a != nil && !*a {
		t.Error("the agent pod does not mount its service account token: it could not call TokenReview")
	}
}

// chartValues is a values file switching every optional part on.
const chartValues = `
elasticsearch:
  enabled: true
  url: https://es.example.com:9200
  apiKeySecret: es-key
alerts:
  sinks:
    - file:/var/lib/correlator/alerts.jsonl
    - syslog+tls://siem.example.com:6514
  rules: |
    - name: exec-in-prod
      match: {namespace: prod}
tls:
  existingSecret: api-tls
audit:
  logHostPath: /var/log/kubernetes/audit
  logFiles: [/var/log/kubernetes/audit/audit.log]
auth:
  existingSecret: my-token
  kubernetes: true
responder:
  users: [alice@example.com]
  groups: [sre]
controlPlane:
  enabled: true
networkPolicy:
  egress:
    - to: [{ipBlock: {cidr: 10.0.0.0/8}}]
`

func TestChartOptions(t *testing.T) {
	values := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(values, []byte(chartValues), 0o600); err != nil {
		t.Fatal(err)
	}
	objs := renderObjects(t, "-f", values)
	for _, o := range objs {
		if _, ok := o.(*corev1.Secret); ok {
			t.Errorf("%s rendered although auth.existingSecret is set", kindName(o))
		}
	}
	ds := only[*appsv1.DaemonSet](t, objs, "correlator")
	c := ds.Spec.Template.Spec.Containers[0]
	checkAgentSecurity(t, c.SecurityContext)
	cm := only[*corev1.ConfigMap](t, objs, "correlator")
	var cfg map[string]any
	if err := yaml.UnmarshalStrict([]byte(cm.Data[AgentConfigKey]), &cfg); err != nil {
		t.Fatal(err)
	}
	wantCfg := map[string]any{
		"store": "elasticsearch", "es-url": "https://es.example.com:9200",
		"es-api-key-file": "/etc/correlator/elasticsearch/api-key",
		"alert-sink":      []any{"file:/var/lib/correlator/alerts.jsonl", "syslog+tls://siem.example.com:6514"},
		"rules":           "/etc/correlator/config/rules.yaml",
		"tls-cert":        "/etc/correlator/tls/tls.crt", "tls-key": "/etc/correlator/tls/tls.key",
		"audit-log":       []any{"/var/log/kubernetes/audit/audit.log"},
		"auth-kubernetes": true,
	}
	for k, v := range wantCfg {
		if !equality.Semantic.DeepEqual(cfg[k], v) {
			t.Errorf("config %s = %#v, want %#v", k, cfg[k], v)
		}
		if s, ok := v.(string); ok && strings.HasPrefix(s, "/") {
			if _, ok := mountFor(c.VolumeMounts, s); !ok {
				t.Errorf("config %s=%s is on no mount", k, s)
			}
		}
	}
	if !strings.Contains(cm.Data["rules.yaml"], "exec-in-prod") {
		t.Errorf("rules.yaml %q lacks the rules", cm.Data["rules.yaml"])
	}
	if s := c.LivenessProbe.HTTPGet.Scheme; s != corev1.URISchemeHTTPS {
		t.Errorf("liveness probe scheme %s with TLS on", s)
	}
	m, _ := mountFor(c.VolumeMounts, "/var/log/kubernetes/audit/audit.log")
	if m.Name != "audit-log" || !m.ReadOnly {
		t.Errorf("audit log mount %+v, want read-only audit-log", m)
	}
	for _, v := range ds.Spec.Template.Spec.Volumes {
		if v.Name == "token" && v.Secret.SecretName != "my-token" {
			t.Errorf("token volume mounts %s, want my-token", v.Secret.SecretName)
		}
	}
	np := only[*networkingv1.NetworkPolicy](t, objs, "correlator")
	if !slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeEgress) || len(np.Spec.Egress) != 1 {
		t.Errorf("network policy %+v, want the egress rule", np.Spec)
	}
	checkShipper(t, only[*appsv1.DaemonSet](t, objs, "correlator-audit-shipper"))
	checkRBAC(t, objs)
	checkResponderBindings(t, objs)
}

// checkShipper checks the control-plane audit shipper: no capability at
// all, the audit log read-only, control-plane nodes only.
func checkShipper(t *testing.T, ds *appsv1.DaemonSet) {
	t.Helper()
	spec := ds.Spec.Template.Spec
	if spec.HostPID || spec.HostNetwork {
		t.Error("shipper needs no host namespace")
	}
	if _, ok := spec.NodeSelector["node-role.kubernetes.io/control-plane"]; !ok {
		t.Errorf("nodeSelector %v: want control-plane nodes", spec.NodeSelector)
	}
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		t.Error("shipper does not call the Kubernetes API: automountServiceAccountToken must be false")
	}
	c := spec.Containers[0]
	sc := c.SecurityContext
	if sc == nil || sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) != 0 {
		t.Fatalf("shipper capabilities %+v, want all dropped and none added", sc)
	}
	if *sc.Privileged || *sc.AllowPrivilegeEscalation || !*sc.ReadOnlyRootFilesystem {
		t.Errorf("shipper securityContext %+v", sc)
	}
	args := strings.Join(c.Args, " ")
	for _, w := range []string{"audit ship", "--audit-log=/var/log/kubernetes/audit/audit.log", "--es-url=https://es.example.com:9200", "--es-api-key-file=/etc/correlator/elasticsearch/api-key"} {
		if !strings.Contains(args, w) {
			t.Errorf("shipper args %q lack %q", args, w)
		}
	}
	checkHostPaths(t, spec.Volumes, map[string]hostVol{"audit-log": {"/var/log/kubernetes/audit", corev1.HostPathDirectory}})
	m, ok := mountFor(c.VolumeMounts, "/var/log/kubernetes/audit/audit.log")
	if !ok || !m.ReadOnly {
		t.Errorf("audit log mount %+v, want read-only", m)
	}
}

func TestChartRefuses(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--set", "controlPlane.enabled=true"}, "set elasticsearch.url"},
		{[]string{"--set", "elasticsearch.enabled=true"}, "elasticsearch.url is required"},
	} {
		_, err := RenderChart(t.Context(), helmBin(t), chartDir, release, namespace, c.args...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: error %v, want one saying %q", c.args, err, c.want)
		}
	}
}

// plainObjects decodes the files a kustomization lists.
func plainObjects(t *testing.T, dir string) []runtime.Object {
	t.Helper()
	var k struct {
		Resources []string `json:"resources"`
	}
	if err := yaml.Unmarshal(readFile(t, filepath.Join(dir, "kustomization.yaml")), &k); err != nil {
		t.Fatal(err)
	}
	var out []runtime.Object
	for _, f := range k.Resources {
		objs, err := decoder(t).DecodeAll(readFile(t, filepath.Join(dir, f)))
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		out = append(out, objs...)
	}
	return out
}

// withoutHelm drops what only Helm adds: its labels, the config checksum,
// the generated token Secret and its hooks (the uninstall Job).
func withoutHelm(t *testing.T, objs []runtime.Object) map[string]runtime.Object {
	t.Helper()
	out := map[string]runtime.Object{}
	for _, o := range objs {
		if _, ok := o.(*corev1.Secret); ok {
			continue
		}
		m, err := meta.Accessor(o)
		if err != nil {
			t.Fatal(err)
		}
		if m.GetAnnotations()["helm.sh/hook"] != "" {
			continue
		}
		l := m.GetLabels()
		delete(l, helmLabel)
		delete(l, managedBy)
		m.SetLabels(l)
		if ds, ok := o.(*appsv1.DaemonSet); ok {
			delete(ds.Spec.Template.Annotations, checksumAn)
			if len(ds.Spec.Template.Annotations) == 0 {
				ds.Spec.Template.Annotations = nil
			}
		}
		out[kindName(o)] = o
	}
	return out
}

func byName(objs []runtime.Object) map[string]runtime.Object {
	out := map[string]runtime.Object{}
	for _, o := range objs {
		out[kindName(o)] = o
	}
	return out
}

func compareObjects(t *testing.T, what string, got, want map[string]runtime.Object) {
	t.Helper()
	for k, w := range want {
		g, ok := got[k]
		if !ok {
			t.Errorf("%s: %s missing", what, k)
			continue
		}
		if !equality.Semantic.DeepEqual(g, w) {
			gy, _ := yaml.Marshal(g)
			wy, _ := yaml.Marshal(w)
			t.Errorf("%s: %s differs from the chart\n--- plain\n%s\n--- chart\n%s", what, k, gy, wy)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("%s: %s is not in the chart", what, k)
		}
	}
}

const shipperSet = "controlPlane.enabled=true,elasticsearch.url=https://elasticsearch.example.com:9200,elasticsearch.apiKeySecret=correlator-elasticsearch"

func TestPlainManifestsMatchChart(t *testing.T) {
	plain := byName(plainObjects(t, plainDir))
	ns, ok := plain["Namespace/correlator"].(*corev1.Namespace)
	if !ok {
		t.Fatal("plain manifests lack Namespace correlator")
	}
	if ns.Labels["pod-security.kubernetes.io/enforce"] != "privileged" {
		t.Error("namespace must allow the agent's pod (pod-security enforce=privileged)")
	}
	delete(plain, "Namespace/correlator")
	compareObjects(t, plainDir, plain, withoutHelm(t, renderObjects(t)))

	ds := plain["DaemonSet/correlator"].(*appsv1.DaemonSet)
	checkAgentPod(t, ds)
	cm := plain["ConfigMap/correlator"].(*corev1.ConfigMap)
	checkConfigPaths(t, []byte(cm.Data[AgentConfigKey]), ds.Spec.Template.Spec.Containers[0].VolumeMounts)

	cp := byName(plainObjects(t, filepath.Join(plainDir, "control-plane")))
	chart := withoutHelm(t, renderObjects(t, "--set", shipperSet, "--show-only", "templates/control-plane.yaml"))
	compareObjects(t, "control-plane", cp, chart)
}

// TestKustomize renders both kustomizations with kubectl, as an operator
// would, and checks that kustomize kept every object as written.
func TestKustomize(t *testing.T) {
	k := kubectl(t)
	for _, dir := range []string{plainDir, filepath.Join(plainDir, "control-plane")} {
		out, err := exec.CommandContext(t.Context(), k, "kustomize", dir).Output()
		if err != nil {
			var stderr string
			if ee, ok := err.(*exec.ExitError); ok {
				stderr = string(ee.Stderr)
			}
			t.Fatalf("kubectl kustomize %s: %v\n%s", dir, err, stderr)
		}
		objs, err := decoder(t).DecodeAll(out)
		if err != nil {
			t.Fatalf("kubectl kustomize %s output: %v", dir, err)
		}
		compareObjects(t, "kustomize "+dir, byName(objs), byName(plainObjects(t, dir)))
	}
}
