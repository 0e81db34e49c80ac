package meta

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	tu "github.com/execid/correlator/internal/testutil"
)

func TestPodLabels(t *testing.T) {
	tests := []struct {
		name    string
		sandbox map[string]string
		want    map[string]string
	}{
		{"nil", nil, nil},
		{"only the kubelet's", map[string]string{labelPodUID: uidA, labelPodNamespace: "default", labelPodName: "web-0"}, nil},
		{
			name: "the pod's kept verbatim, the kubelet's dropped",
			sandbox: map[string]string{labelPodUID: uidA, labelPodName: "web-0", "app": "web", "team": "",
				"app.kubernetes.io/name": "nginx", "pod-template-hash": "5d4f8c", "statefulset.kubernetes.io/pod-name": "web-0"},
			want: map[string]string{"app": "web", "team": "", "app.kubernetes.io/name": "nginx", "pod-template-hash": "5d4f8c",
				"statefulset.kubernetes.io/pod-name": "web-0"},
		},
		{
			name:    "runtime internals dropped",
			sandbox: map[string]string{"io.kubernetes.docker.type": "podsandbox", "annotation.kubernetes.io/config.seen": "x", "tier": "db"},
			want:    map[string]string{"tier": "db"},
		},
		{
			name:    "a prefix only as a prefix",
			sandbox: map[string]string{"io.kubernetes": "a", "my.io.kubernetes.x": "b", "annotation": "c"},
			want:    map[string]string{"io.kubernetes": "a", "my.io.kubernetes.x": "b", "annotation": "c"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := maps.Clone(tt.sandbox)
			if got := podLabels(tt.sandbox); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("podLabels() = %v, want %v", got, tt.want)
			}
			if !maps.Equal(in, tt.sandbox) {
				t.Errorf("podLabels changed its input to %v", tt.sandbox)
			}
		})
	}
}

// TestCRIResolverPodLabels: one listing of each kind brings every
// container its pod's own labels, joined by sandbox ID; a pod without
// labels of its own, and a container whose sandbox is not listed, have
// none.
func TestCRIResolverPodLabels(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "cri.sock")
	f := &fakeRuntimeService{}
	web := infoA
	web.Labels = map[string]string{"app": "web", "team": "shop"}
	sidecar := web
	sidecar.ContainerID, sidecar.Container = strings.Repeat("c", 64), "envoy"
	orphan := Info{ContainerID: strings.Repeat("d", 64), PodUID: uidA, Namespace: "default", Pod: "gone-0", Container: "app"}
	f.set(kubeContainer(web), kubeContainer(sidecar), kubeContainer(infoB), kubeContainer(orphan))
	f.setSandboxes(kubeSandbox(web), kubeSandbox(infoB)) // infoB's pod has only the kubelet's labels
	f.serve(t, socket)
	r, _, _ := newTestCRI(t, socket)

	ctx := context.Background()
	for _, want := range []Info{web, sidecar, infoB, orphan} {
		got, found, err := r.Resolve(ctx, want.ContainerID, "")
		if err != nil || !found || !reflect.DeepEqual(got, want) {
			t.Errorf("Resolve(%s) = %+v, %v, %v; want %+v", want.Container, got, found, err, want)
		}
	}
	if c, s := f.calls.Load(), f.sandboxCalls.Load(); c != 1 || s != 1 {
		t.Errorf("listed containers %d and sandboxes %d times, want once each", c, s)
	}
}

// TestServiceRunRefreshesLabels: the interval listing brings a new pod's
// labels (a pod recreated under its name, with other labels) to the index.
func TestServiceRunRefreshesLabels(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "cri.sock")
	f := &fakeRuntimeService{}
	v1 := infoA
	v1.Labels = map[string]string{"app": "web", "version": "1"}
	f.set(kubeContainer(v1))
	f.setSandboxes(kubeSandbox(v1))
	f.serve(t, socket)
	s, stop := runService(t, socket)

	labelsOf := func(cid string) map[string]string { info, _ := s.cri.lookup(cid); return info.Labels }
	tu.Eventually(t, "the first listing's labels", func() bool { return maps.Equal(labelsOf(cidA), v1.Labels) })
	v2 := infoB
	v2.Pod, v2.Labels = v1.Pod, map[string]string{"app": "web", "version": "2"}
	f.set(kubeContainer(v2))
	f.setSandboxes(kubeSandbox(v2))
	tu.Eventually(t, "the interval listing's labels", func() bool {
		_, old := s.cri.lookup(cidA)
		return !old && maps.Equal(labelsOf(cidB), v2.Labels)
	})
	stop()
	if got, found, err := s.Resolve(context.Background(), cidB, ""); err != nil || !found || !reflect.DeepEqual(got, v2) {
		t.Fatalf("Resolve() = %+v, %v, %v; want %+v", got, found, err, v2)
	}
}

// TestCRISandboxListingFails: containers listed but sandboxes not is a
// failed listing: an error naming the sandboxes, counted, and the index
// keeps the last good listing, labels included, rather than taking the
// containers without them.
func TestCRISandboxListingFails(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "cri.sock")
	f := &fakeRuntimeService{}
	web := infoA
	web.Labels = map[string]string{"app": "web"}
	f.set(kubeContainer(web))
	f.setSandboxes(kubeSandbox(web))
	f.serve(t, socket)
	r, m, now := newTestCRI(t, socket)
	ctx := context.Background()
	if err := r.refresh(ctx); err != nil {
		t.Fatal(err)
	}

	f.set(kubeContainer(web), kubeContainer(infoB))
	f.failSandboxes(errors.New("sandbox store locked"))
	*now = now.Add(time.Second) // past the miss rate limit
	_, found, err := r.Resolve(ctx, cidB, "")
	if found || err == nil || !strings.Contains(err.Error(), "listing CRI pod sandboxes at "+socket) ||
		!strings.Contains(err.Error(), "sandbox store locked") {
		t.Fatalf("Resolve() = %v, %v; want the sandbox listing's error", found, err)
	}
	if got, ok := r.lookup(cidA); !ok || !reflect.DeepEqual(got, web) {
		t.Errorf("after a failed listing the index has %+v, %v; want the last good %+v", got, ok, web)
	}
	if n := testutil.ToFloat64(m.criRefreshes.WithLabelValues("error")); n != 1 {
		t.Errorf("error refreshes = %v, want 1", n)
	}

	f.failSandboxes(nil)
	*now = now.Add(time.Second)
	if got, found, err := r.Resolve(ctx, cidB, ""); err != nil || !found || !reflect.DeepEqual(got, infoB) {
		t.Fatalf("after recovery Resolve() = %+v, %v, %v; want %+v", got, found, err, infoB)
	}
}

// TestIndexCRIShared: the containers of one pod and its sandbox share one
// labels map, and containers without an ID are skipped.
func TestIndexCRIShared(t *testing.T) {
	web := infoA
	web.Labels = map[string]string{"app": "web"}
	sidecar := web
	sidecar.ContainerID = strings.Repeat("c", 64)
	idx := indexCRI([]*runtimeapi.Container{kubeContainer(web), kubeContainer(sidecar), {Id: ""}},
		[]*runtimeapi.PodSandbox{kubeSandbox(web)})
	if len(idx) != 3 {
		t.Fatalf("indexed %d containers and sandboxes, want 3: %+v", len(idx), idx)
	}
	a, c, s := idx[web.ContainerID].Labels, idx[sidecar.ContainerID].Labels, idx["sandbox-"+web.Pod].Labels
	if !maps.Equal(a, web.Labels) || fmt.Sprintf("%p", a) != fmt.Sprintf("%p", c) || fmt.Sprintf("%p", a) != fmt.Sprintf("%p", s) {
		t.Errorf("labels %v (%p), %v (%p) and the sandbox's %v (%p): want %v, one map", a, a, c, c, s, s, web.Labels)
	}
}
