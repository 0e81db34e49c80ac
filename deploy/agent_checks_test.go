package deploy

import (
	"path"
	"reflect"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"
)

// agentCaps is the node agent's whole capability set; every other one is
// dropped. TestCapabilitiesEachNeeded shows each is needed.
var agentCaps = []corev1.Capability{"BPF", "PERFMON", "SYS_PTRACE", "DAC_READ_SEARCH"}

type hostVol struct {
	path string
	typ  corev1.HostPathType
}

// agentHostPaths are the host directories and files the agent sees.
var agentHostPaths = map[string]hostVol{
	"state":      {"/var/lib/correlator", corev1.HostPathDirectoryOrCreate},
	"bpffs":      {"/sys/fs/bpf", corev1.HostPathDirectory},
	"proc":       {"/proc", corev1.HostPathDirectory},
	"btf":        {"/sys/kernel/btf", corev1.HostPathDirectory},
	"cgroup":     {"/sys/fs/cgroup", corev1.HostPathDirectory},
	"cri-socket": {"/run/containerd/containerd.sock", corev1.HostPathSocket},
}

type mount struct {
	path     string
	readOnly bool
}

var agentMounts = map[string]mount{
	"config":     {"/etc/correlator/config", true},
	"token":      {"/etc/correlator/token", true},
	"tmp":        {"/tmp", false},
	"state":      {"/var/lib/correlator", false},
	"bpffs":      {"/sys/fs/bpf", false},
	"proc":       {"/host/proc", true},
	"btf":        {"/sys/kernel/btf", true},
	"cgroup":     {"/host/sys/fs/cgroup", true},
	"cri-socket": {"/run/containerd/containerd.sock", true},
}

// agentRules is everything the agent may do on the Kubernetes API.
var agentRules = []rbacv1.PolicyRule{
	{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"tokenreviews"}, Verbs: []string{"create"}},
	{APIGroups: []string{"authorization.k8s.io"}, Resources: []string{"subjectaccessreviews"}, Verbs: []string{"create"}},
	{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch"}},
}

var readerRules = []rbacv1.PolicyRule{
	{APIGroups: []string{"correlator.execid.io"}, Resources: []string{"sessions"}, Verbs: []string{"get"}},
}

// responderRules is what `kubectl correlator` needs cluster-wide: find
// pods' nodes and the agents, list nodes, read the API with one's token.
var responderRules = []rbacv1.PolicyRule{
	{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list"}},
	{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"list"}},
	{APIGroups: []string{"correlator.execid.io"}, Resources: []string{"sessions"}, Verbs: []string{"get"}},
}

// responderNSRules is what it needs in the agents' namespace: GET (only)
// through the pod proxy, and tokens for the reader service account.
var responderNSRules = []rbacv1.PolicyRule{
	{APIGroups: []string{""}, Resources: []string{"pods/proxy"}, Verbs: []string{"get"}},
	{APIGroups: []string{""}, Resources: []string{"serviceaccounts/token"}, ResourceNames: []string{"correlator-reader"}, Verbs: []string{"create"}},
}

// checkAgentPod checks the node agent's pod spec: privileges, mounts,
// probes, scheduling.
func checkAgentPod(t *testing.T, ds *appsv1.DaemonSet) {
	t.Helper()
	spec := ds.Spec.Template.Spec
	if !spec.HostPID || spec.HostNetwork || spec.HostIPC {
		t.Errorf("hostPID=%v hostNetwork=%v hostIPC=%v, want only hostPID", spec.HostPID, spec.HostNetwork, spec.HostIPC)
	}
	if want := []corev1.Toleration{{Operator: corev1.TolerationOpExists}}; !equality.Semantic.DeepEqual(spec.Tolerations, want) {
		t.Errorf("tolerations %+v, want one that tolerates every taint", spec.Tolerations)
	}
	if spec.PriorityClassName != "correlator-node-agent" {
		t.Errorf("priorityClassName %q", spec.PriorityClassName)
	}
	if spec.ServiceAccountName != "correlator" {
		t.Errorf("serviceAccountName %q", spec.ServiceAccountName)
	}
	if spec.SecurityContext != nil && !equality.Semantic.DeepEqual(*spec.SecurityContext, corev1.PodSecurityContext{}) {
		t.Errorf("pod securityContext %+v, want none (the container's says it all)", spec.SecurityContext)
	}
	if len(spec.Containers) != 1 || len(spec.InitContainers) != 0 {
		t.Fatalf("%d containers, %d init containers; want the agent alone", len(spec.Containers), len(spec.InitContainers))
	}
	c := spec.Containers[0]
	checkAgentSecurity(t, c.SecurityContext)
	if !slices.Contains(c.Args, "run") || !slices.Contains(c.Args, "--config=/etc/correlator/config/config.yaml") {
		t.Errorf("args %q, want run --config=/etc/correlator/config/config.yaml", c.Args)
	}
	checkProbe(t, "liveness", c.LivenessProbe, "/healthz")
	checkProbe(t, "readiness", c.ReadinessProbe, "/readyz")
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if c.Resources.Requests.Name(r, "").IsZero() || c.Resources.Limits.Name(r, "").IsZero() {
			t.Errorf("resources %v: want a request and a limit for %s", c.Resources, r)
		}
	}
	if len(c.Ports) != 1 || c.Ports[0].Name != "api" {
		t.Errorf("ports %+v, want one named api", c.Ports)
	}
	checkHostPaths(t, spec.Volumes, agentHostPaths)
	checkMounts(t, c.VolumeMounts, agentMounts)
}

func checkAgentSecurity(t *testing.T, sc *corev1.SecurityContext) {
	t.Helper()
	if sc == nil {
		t.Fatal("agent has no securityContext")
	}
	if sc.Privileged == nil || *sc.Privileged {
		t.Error("privileged must be set, to false")
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Error("allowPrivilegeEscalation must be false")
	}
	if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Error("readOnlyRootFilesystem must be true")
	}
	// uid 0 is required: added capabilities reach a non-root process only
	// through file capabilities, which no_new_privs voids.
	if sc.RunAsUser == nil || *sc.RunAsUser != 0 || sc.RunAsNonRoot == nil || *sc.RunAsNonRoot {
		t.Errorf("runAsUser %v runAsNonRoot %v, want an explicit 0 and false", sc.RunAsUser, sc.RunAsNonRoot)
	}
	if sc.Capabilities == nil {
		t.Fatal("no capabilities section")
	}
	if !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("drop %v, want [ALL]", sc.Capabilities.Drop)
	}
	got := slices.Sorted(slices.Values(sc.Capabilities.Add))
	if want := slices.Sorted(slices.Values(agentCaps)); !slices.Equal(got, want) {
		t.Errorf("add %v, want exactly %v", got, want)
	}
	if sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("seccompProfile %+v, want RuntimeDefault", sc.SeccompProfile)
	}
	if sc.AppArmorProfile == nil || sc.AppArmorProfile.Type != corev1.AppArmorProfileTypeUnconfined {
		t.Errorf("appArmorProfile %+v, want Unconfined (ptrace-read of host processes)", sc.AppArmorProfile)
	}
}

func checkProbe(t *testing.T, name string, p *corev1.Probe, path string) {
	t.Helper()
	if p == nil || p.HTTPGet == nil {
		t.Errorf("%s probe: want an HTTP GET of %s", name, path)
		return
	}
	if p.HTTPGet.Path != path || p.HTTPGet.Port.String() != "api" {
		t.Errorf("%s probe: GET %s on %s, want %s on api", name, p.HTTPGet.Path, p.HTTPGet.Port.String(), path)
	}
}

func checkHostPaths(t *testing.T, vols []corev1.Volume, want map[string]hostVol) {
	t.Helper()
	got := map[string]hostVol{}
	for _, v := range vols {
		if v.HostPath != nil {
			typ := corev1.HostPathUnset
			if v.HostPath.Type != nil {
				typ = *v.HostPath.Type
			}
			got[v.Name] = hostVol{v.HostPath.Path, typ}
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("hostPath volumes\n got %v\nwant %v", got, want)
	}
}

func checkMounts(t *testing.T, ms []corev1.VolumeMount, want map[string]mount) {
	t.Helper()
	got := map[string]mount{}
	for _, m := range ms {
		got[m.Name] = mount{m.MountPath, m.ReadOnly}
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("mounts\n got %v\nwant %v", got, want)
	}
}

// checkConfigPaths checks that every path in the agent's config file lies
// on a mount that allows what the agent does there.
func checkConfigPaths(t *testing.T, config []byte, ms []corev1.VolumeMount) {
	t.Helper()
	var cfg map[string]any
	if err := yaml.UnmarshalStrict(config, &cfg); err != nil {
		t.Fatalf("parsing agent config: %v", err)
	}
	str := func(k string) string { s, _ := cfg[k].(string); return s }
	store, _ := strings.CutPrefix(str("store"), "sqlite:")
	for _, c := range []struct {
		key, path string
		write     bool
	}{
		{"store", path.Dir(store), true},
		{"audit-checkpoint-dir", str("audit-checkpoint-dir"), true},
		{"pin-path", str("pin-path"), true},
		{"proc-root", str("proc-root"), false},
		{"token-file", str("token-file"), false},
		{"cri-socket", str("cri-socket"), false},
	} {
		if c.path == "" || c.path == "." {
			t.Errorf("config key %s missing", c.key)
			continue
		}
		m, ok := mountFor(ms, c.path)
		if !ok {
			t.Errorf("config %s=%s is on no mount", c.key, c.path)
		} else if c.write && m.ReadOnly {
			t.Errorf("config %s=%s is on read-only mount %s", c.key, c.path, m.Name)
		}
	}
}

// mountFor is the deepest mount holding p.
func mountFor(ms []corev1.VolumeMount, p string) (corev1.VolumeMount, bool) {
	var best corev1.VolumeMount
	for _, m := range ms {
		if (p == m.MountPath || strings.HasPrefix(p, m.MountPath+"/")) && len(m.MountPath) > len(best.MountPath) {
			best = m
		}
	}
	return best, best.Name != ""
}

// checkRBAC checks the agent's rights exactly, and that nothing else
// grants any.
func checkRBAC(t *testing.T, objs []runtime.Object) {
	t.Helper()
	for _, o := range objs {
		switch x := o.(type) {
		case *rbacv1.ClusterRole:
			want := map[string][]rbacv1.PolicyRule{"correlator-agent": agentRules, "correlator-reader": readerRules,
				"correlator-responder": responderRules}[x.Name]
			if want == nil {
				t.Errorf("unexpected ClusterRole %s", x.Name)
			} else if !equality.Semantic.DeepEqual(x.Rules, want) {
				t.Errorf("ClusterRole %s rules\n got %+v\nwant %+v", x.Name, x.Rules, want)
			}
		case *rbacv1.ClusterRoleBinding:
			if x.Name == "correlator-responder" {
				continue // to responders: checkResponderBindings
			}
			sa := map[string]string{"correlator-agent": "correlator", "correlator-reader": "correlator-reader"}[x.Name]
			wantSubj := []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: namespace}}
			if sa == "" || x.RoleRef.Name != x.Name || x.RoleRef.Kind != "ClusterRole" || !equality.Semantic.DeepEqual(x.Subjects, wantSubj) {
				t.Errorf("ClusterRoleBinding %s: %+v to %+v", x.Name, x.RoleRef, x.Subjects)
			}
		case *rbacv1.Role:
			if x.Name != "correlator-responder" || x.Namespace != namespace {
				t.Errorf("unexpected Role %s/%s", x.Namespace, x.Name)
			} else if !equality.Semantic.DeepEqual(x.Rules, responderNSRules) {
				t.Errorf("Role %s rules\n got %+v\nwant %+v", x.Name, x.Rules, responderNSRules)
			}
		case *rbacv1.RoleBinding:
			if x.Name != "correlator-responder" {
				t.Errorf("unexpected RoleBinding %s", x.Name)
			}
		}
	}
}

// checkNetwork checks that the Service and NetworkPolicy select the agent
// pods and name its API port.
func checkNetwork(t *testing.T, objs []runtime.Object, ds *appsv1.DaemonSet) {
	t.Helper()
	pod := labels.Set(ds.Spec.Template.Labels)
	svc := only[*corev1.Service](t, objs, "correlator")
	if !labels.SelectorFromSet(svc.Spec.Selector).Matches(pod) {
		t.Errorf("service selector %v does not select agent pods %v", svc.Spec.Selector, pod)
	}
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].TargetPort.String() != "api" {
		t.Errorf("service ports %+v, want one to port api", svc.Spec.Ports)
	}
	np := only[*networkingv1.NetworkPolicy](t, objs, "correlator")
	sel := labels.SelectorFromSet(np.Spec.PodSelector.MatchLabels)
	if !sel.Matches(pod) {
		t.Errorf("network policy selector %v does not select agent pods", np.Spec.PodSelector)
	}
	if len(np.Spec.Ingress) != 1 || len(np.Spec.Ingress[0].Ports) != 1 || np.Spec.Ingress[0].Ports[0].Port.String() != "api" {
		t.Errorf("network policy ingress %+v, want the api port only", np.Spec.Ingress)
	}
	if !slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) {
		t.Errorf("policyTypes %v lack Ingress", np.Spec.PolicyTypes)
	}
}

// checkResponderBindings checks that responder.users and .groups get
// both responder roles, and nothing else does.
func checkResponderBindings(t *testing.T, objs []runtime.Object) {
	t.Helper()
	want := []rbacv1.Subject{
		{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: "alice@example.com"},
		{Kind: "Group", APIGroup: "rbac.authorization.k8s.io", Name: "sre"},
	}
	crb := only[*rbacv1.ClusterRoleBinding](t, objs, "correlator-responder")
	rb := only[*rbacv1.RoleBinding](t, objs, "correlator-responder")
	if crb.RoleRef.Kind != "ClusterRole" || crb.RoleRef.Name != "correlator-responder" || !equality.Semantic.DeepEqual(crb.Subjects, want) {
		t.Errorf("ClusterRoleBinding correlator-responder: %+v to %+v", crb.RoleRef, crb.Subjects)
	}
	if rb.Namespace != namespace || rb.RoleRef.Kind != "Role" || rb.RoleRef.Name != "correlator-responder" || !equality.Semantic.DeepEqual(rb.Subjects, want) {
		t.Errorf("RoleBinding correlator-responder: %+v to %+v", rb.RoleRef, rb.Subjects)
	}
}
