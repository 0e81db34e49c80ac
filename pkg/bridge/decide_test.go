package bridge

import (
	"encoding/json"
	"slices"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// TestDecideSkips: requests answered allowed with no patch, and why.
func TestDecideSkips(t *testing.T) {
	attach := execRequest(t, "app", "sh")
	attach.SubResource, attach.Kind.Kind = "attach", "PodAttachOptions"
	attach.Object.Raw = []byte(`{"kind":"PodAttachOptions","apiVersion":"v1","container":"app","stdin":true}`)
	create := execRequest(t, "app", "sh")
	create.SubResource, create.Operation = "", admissionv1.Create
	other := execRequest(t, "app", "sh")
	other.Resource.Group = "apps"
	notOpts := execRequest(t, "app", "sh")
	notOpts.Object.Raw = []byte(`{"kind":"Pod","apiVersion":"v1","metadata":{"name":"x"}}`)
	badJSON := execRequest(t, "app", "sh")
	badJSON.Object.Raw = []byte(`{"kind":"PodExecOptions","command":"sh"}`)
	noObj := execRequest(t, "app", "sh")
	noObj.Object.Raw = nil

	for _, c := range []struct {
		name      string
		req       *admissionv1.AdmissionRequest
		pods      PodSource
		kind      Kind
		skip, err string
	}{
		{"attach", attach, nil, KindAttach, SkipAttach, ""},
		{"pod create", create, nil, KindOther, SkipNotHandled, ""},
		{"other group", other, nil, KindOther, SkipNotHandled, ""},
		{"empty command", execRequest(t, "app"), nil, KindExec, SkipEmptyCommand, ""},
		{"unrewritable command", execRequest(t, "app", "/opt/a=b/run", "one"), nil, KindExec, SkipUnrewritable, ""},
		{"object not PodExecOptions", notOpts, nil, KindExec, "", ErrBadObject},
		{"command not a list", badJSON, nil, KindExec, "", ErrBadObject},
		{"no object", noObj, nil, KindExec, "", ErrBadObject},
		{"annotated container", execRequest(t, "app", "sh"), &fakePods{info: PodInfo{Skip: "sidecar, app"}}, KindExec, SkipAnnotated, ""},
		{"annotated all", execRequest(t, "app", "sh"), &fakePods{info: PodInfo{Skip: "*"}}, KindExec, SkipAnnotated, ""},
		{"annotated only container", execRequest(t, "", "sh"), &fakePods{info: PodInfo{Skip: "app", Containers: []string{"app"}}}, KindExec, SkipAnnotated, ""},
		{"windows", execRequest(t, "app", "cmd.exe"), &fakePods{info: PodInfo{Windows: true}}, KindExec, SkipWindows, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := testMutator(t, c.pods).Decide(t.Context(), c.req)
			if d.Kind != c.kind || d.Skip != c.skip || d.Error != c.err || d.Patch != nil || d.ID != "" {
				t.Errorf("decision %+v, want kind %s skip %q error %q and no patch", d, c.kind, c.skip, c.err)
			}
			if (c.err != "") != (d.Err != nil) {
				t.Errorf("err %v with reason %q", d.Err, d.Error)
			}
		})
	}
}

// TestDecidePodLookup: containers the annotation does not name are
// rewritten, and a failed lookup rewrites anyway, counted.
func TestDecidePodLookup(t *testing.T) {
	for _, c := range []struct {
		name      string
		container string
		pods      *fakePods
		err       string
	}{
		{"other container named", "app", &fakePods{info: PodInfo{Skip: "sidecar"}}, ""},
		{"unnamed of several", "", &fakePods{info: PodInfo{Skip: "app", Containers: []string{"app", "b"}}}, ""},
		{"no annotation", "app", &fakePods{}, ""},
		{"lookup fails", "app", &fakePods{err: errLookup}, ErrLookup},
	} {
		t.Run(c.name, func(t *testing.T) {
			req := execRequest(t, c.container, "sh")
			d := testMutator(t, c.pods).Decide(t.Context(), req)
			if d.Patch == nil || d.Skip != "" || d.Error != c.err || c.pods.calls != 1 {
				t.Fatalf("decision %+v after %d lookups", d, c.pods.calls)
			}
			if got := applyExec(t, req, d.Patch); !slices.Equal(got, []string{"env", k + "=" + fixedID, "sh"}) {
				t.Errorf("command %q", got)
			}
		})
	}
}

func TestInfoOf(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{SkipAnnotation: "app"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app"}}}}
	if got := InfoOf(pod); got.Skip != "app" || got.Windows || !slices.Equal(got.Containers, []string{"app"}) {
		t.Errorf("InfoOf = %+v", got)
	}
	pod.Spec.OS = &corev1.PodOS{Name: corev1.Windows}
	if !InfoOf(pod).Windows {
		t.Error("spec.os windows not seen")
	}
	pod.Spec.OS, pod.Spec.NodeSelector = nil, map[string]string{corev1.LabelOSStable: "windows"}
	if !InfoOf(pod).Windows {
		t.Error("windows node selector not seen")
	}
}

func debugPod(names ...string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-0", Namespace: "shop"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}}}
	for _, n := range names {
		p.Spec.EphemeralContainers = append(p.Spec.EphemeralContainers, corev1.EphemeralContainer{
			EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: n, Image: "busybox"}})
	}
	return p
}

// TestDecideEphemeral: kubectl debug's new container gets the key in its
// env (the caller's own value replaced); existing ones are left alone.
func TestDecideEphemeral(t *testing.T) {
	old := debugPod("debugger-1")
	old.Status.EphemeralContainerStatuses = []corev1.ContainerStatus{{Name: "debugger-1"}}
	pod := debugPod("debugger-1", "debugger-2")
	pod.Spec.EphemeralContainers[1].Env = []corev1.EnvVar{{Name: "A", Value: "1"}, {Name: k, Value: "evil"}}
	req := ephemeralRequest(t, pod, old)
	d := testMutator(t, nil).Decide(t.Context(), req)
	if d.Kind != KindEphemeral || d.ID != fixedID || d.Container != "debugger-2" || !slices.Equal(d.CallerKey, []string{KeyOverwritten}) {
		t.Fatalf("decision %+v", d)
	}
	var got corev1.Pod
	if err := json.Unmarshal(apply(t, req.Object.Raw, d.Patch), &got); err != nil {
		t.Fatal(err)
	}
	if env := got.Spec.EphemeralContainers[0].Env; env != nil {
		t.Errorf("existing ephemeral container's env changed: %v", env)
	}
	want := []corev1.EnvVar{{Name: "A", Value: "1"}, {Name: k, Value: fixedID}}
	if env := got.Spec.EphemeralContainers[1].Env; !slices.Equal(env, want) {
		t.Errorf("new container env %v, want %v", env, want)
	}

	// Two new ones share the request's ID; no env at all is fine.
	req = ephemeralRequest(t, debugPod("a", "b"), debugPod())
	d = testMutator(t, nil).Decide(t.Context(), req)
	if err := json.Unmarshal(apply(t, req.Object.Raw, d.Patch), &got); err != nil {
		t.Fatal(err)
	}
	for _, c := range got.Spec.EphemeralContainers {
		if !slices.Equal(c.Env, []corev1.EnvVar{{Name: k, Value: fixedID}}) {
			t.Errorf("%s env %v", c.Name, c.Env)
		}
	}
	if d.Container != "a,b" {
		t.Errorf("containers %q", d.Container)
	}

	if d := testMutator(t, nil).Decide(t.Context(), ephemeralRequest(t, debugPod("a"), debugPod("a"))); d.Skip != SkipNoNew || d.Patch != nil {
		t.Errorf("no new container: %+v", d)
	}
	noOld := ephemeralRequest(t, debugPod("a"), debugPod())
	noOld.OldObject = runtime.RawExtension{}
	if d := testMutator(t, nil).Decide(t.Context(), noOld); d.Error != ErrBadObject || d.Patch != nil {
		t.Errorf("no old object: %+v", d)
	}
}
