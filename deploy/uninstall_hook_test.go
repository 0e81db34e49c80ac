package deploy

import (
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// checkUninstallHook: `helm uninstall` first runs `correlator uninstall`
// against the agents' own bpffs pin path, one pod per node, with the
// agent's bpffs mount and no more privilege than the agent's.
func checkUninstallHook(t *testing.T, objs []runtime.Object, ds *appsv1.DaemonSet) {
	t.Helper()
	job := only[*batchv1.Job](t, objs, "correlator-uninstall")
	if job.Annotations["helm.sh/hook"] != "pre-delete" {
		t.Errorf("uninstall Job hook %q, want pre-delete", job.Annotations["helm.sh/hook"])
	}
	pod := job.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("uninstall Job has %d containers", len(pod.Containers))
	}
	c := pod.Containers[0]
	agent := ds.Spec.Template.Spec.Containers[0]
	if c.Image != agent.Image || !slices.Contains(c.Args, "uninstall") || !slices.Contains(c.Args, "--pin-path=/sys/fs/bpf/correlator") {
		t.Errorf("uninstall container image %q args %v, want the agent's image running uninstall on its pin path", c.Image, c.Args)
	}
	hostPath := func(vols []corev1.Volume, name string) string {
		for _, v := range vols {
			if v.Name == name && v.HostPath != nil {
				return v.HostPath.Path
			}
		}
		return ""
	}
	if got, want := hostPath(pod.Volumes, "bpffs"), hostPath(ds.Spec.Template.Spec.Volumes, "bpffs"); got == "" || got != want {
		t.Errorf("uninstall bpffs hostPath %q, want the agent's %q", got, want)
	}
	mounted := false
	for _, m := range c.VolumeMounts {
		mounted = mounted || m.Name == "bpffs" && m.MountPath == "/sys/fs/bpf" && !m.ReadOnly
	}
	if !mounted {
		t.Errorf("uninstall mounts %v, want bpffs read-write at /sys/fs/bpf", c.VolumeMounts)
	}
	sc := c.SecurityContext
	if sc == nil || sc.Privileged == nil || *sc.Privileged || sc.Capabilities == nil {
		t.Fatalf("uninstall security context %+v, want unprivileged with explicit capabilities", sc)
	}
	for _, capability := range sc.Capabilities.Add {
		if !slices.Contains(agent.SecurityContext.Capabilities.Add, capability) {
			t.Errorf("uninstall adds %s, which the agent itself does not have", capability)
		}
	}
	anti := pod.Affinity
	if anti == nil || anti.PodAntiAffinity == nil || len(anti.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) == 0 ||
		anti.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution[0].TopologyKey != "kubernetes.io/hostname" {
		t.Errorf("uninstall pods may share a node: affinity %+v", anti)
	}
	if *job.Spec.Completions != *job.Spec.Parallelism {
		t.Errorf("completions %d, parallelism %d: want one pod per node at once", *job.Spec.Completions, *job.Spec.Parallelism)
	}
	off := renderObjects(t, "--set", "uninstall.enabled=false")
	for _, o := range off {
		if _, ok := o.(*batchv1.Job); ok {
			t.Error("uninstall.enabled=false still renders the uninstall Job")
		}
	}
}
