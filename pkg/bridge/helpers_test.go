package bridge

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"testing"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	admissionv1 "k8s.io/api/admission/v1"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/execid/correlator/pkg/vocab"
)

// fixedID is the ID every test Mutator draws: its randomness is all 0x11.
const fixedID = "11111111-1111-4111-9111-111111111111"

func testMutator(t testing.TB, pods PodSource) *Mutator {
	t.Helper()
	m, err := NewMutator(vocab.BridgeKey, bytes.NewReader(bytes.Repeat([]byte{0x11}, 1<<20)), pods)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// execRequest is a pods/exec CONNECT for cmd, as the apiserver sends it.
func execRequest(t testing.TB, container string, cmd ...string) *admissionv1.AdmissionRequest {
	t.Helper()
	opts := corev1.PodExecOptions{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "PodExecOptions"},
		Container: container, Command: cmd, Stdin: true, Stdout: true, TTY: true}
	return &admissionv1.AdmissionRequest{
		UID:         types.UID("5f6a1c1e-0000-4000-8000-000000000001"),
		Kind:        metav1.GroupVersionKind{Version: "v1", Kind: "PodExecOptions"},
		Resource:    metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
		SubResource: "exec", Name: "web-0", Namespace: "shop",
		Operation: admissionv1.Connect, UserInfo: authnv1.UserInfo{Username: "alice"},
		Object: runtime.RawExtension{Raw: mustJSON(t, opts)},
	}
}

// ephemeralRequest adds the ephemeral containers of pod that old lacks.
func ephemeralRequest(t testing.TB, pod, old *corev1.Pod) *admissionv1.AdmissionRequest {
	t.Helper()
	pod.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}
	old.TypeMeta = pod.TypeMeta
	return &admissionv1.AdmissionRequest{
		UID:         types.UID("5f6a1c1e-0000-4000-8000-000000000002"),
		Kind:        metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
		Resource:    metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
		SubResource: "ephemeralcontainers", Name: pod.Name, Namespace: pod.Namespace,
		Operation: admissionv1.Update, UserInfo: authnv1.UserInfo{Username: "bob"},
		Object:    runtime.RawExtension{Raw: mustJSON(t, pod)},
		OldObject: runtime.RawExtension{Raw: mustJSON(t, old)},
	}
}

func review(t testing.TB, req *admissionv1.AdmissionRequest) []byte {
	t.Helper()
	r := admissionv1.AdmissionReview{Request: req}
	r.APIVersion, r.Kind = "admission.k8s.io/v1", "AdmissionReview"
	return mustJSON(t, r)
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// applyExec applies patch as the apiserver does (the same JSON Patch
// library) and returns the resulting command.
func applyExec(t testing.TB, req *admissionv1.AdmissionRequest, patch []byte) []string {
	t.Helper()
	out := apply(t, req.Object.Raw, patch)
	var opts corev1.PodExecOptions
	if err := json.Unmarshal(out, &opts); err != nil {
		t.Fatal(err)
	}
	return opts.Command
}

func apply(t testing.TB, doc, patch []byte) []byte {
	t.Helper()
	p, err := jsonpatch.DecodePatch(patch)
	if err != nil {
		t.Fatalf("decoding patch %s: %v", patch, err)
	}
	out, err := p.Apply(doc)
	if err != nil {
		t.Fatalf("applying patch %s: %v", patch, err)
	}
	return out
}

// fakePods is a PodSource with fixed answers.
type fakePods struct {
	info  PodInfo
	err   error
	calls int
}

func (f *fakePods) Pod(context.Context, string, string) (PodInfo, error) {
	f.calls++
	return f.info, f.err
}

var errLookup = errors.New("pods is forbidden")
