package meta

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestCRIResolverStartedAfterListing: a container started just after a
// listing, within MissRefreshInterval, resolves at once with its pod and
// its pod's labels, from ContainerStatus and its sandbox, without a
// listing; its later processes hit the index, and so does its sandbox.
func TestCRIResolverStartedAfterListing(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "cri.sock")
	f := &fakeRuntimeService{}
	f.set(kubeContainer(infoA))
	f.setSandboxes(kubeSandbox(infoA))
	f.serve(t, socket)
	r, m, _ := newTestCRI(t, socket)
	c, err := newCache(r, 16, 5*time.Second, m)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, found, err := c.Resolve(ctx, cidA, uidA); err != nil || !found {
		t.Fatalf("first listing: %v, %v", found, err)
	}

	web := infoB
	web.Labels = map[string]string{"app": "web", "team": "shop"}
	other := infoA // another pod's sandbox, which the label filter leaves out
	other.Pod, other.PodUID, other.Labels = "other-0", "99999999-2222-3333-4444-555555555555", map[string]string{"app": "other"}
	f.set(kubeContainer(infoA), kubeContainer(web))
	f.setSandboxes(kubeSandbox(infoA), kubeSandbox(other), kubeSandbox(web))
	got, found, err := c.Resolve(ctx, cidB, uidB)
	if err != nil || !found || !reflect.DeepEqual(got, web) {
		t.Fatalf("a container started after the listing: %+v, %v, %v; want %+v", got, found, err, web)
	}
	if n, s, p := f.calls.Load(), f.statusCalls.Load(), f.sandboxCalls.Load(); n != 1 || s != 1 || p != 2 {
		t.Errorf("listed containers %d times, asked ContainerStatus %d and ListPodSandbox %d; want 1, 1, 2", n, s, p)
	}

	// The container's next process (another cgroup key, no pod UID) and
	// its pause process hit the index.
	if got, found, err := r.Resolve(ctx, strings.ToUpper(cidB), ""); err != nil || !found || !reflect.DeepEqual(got, web) {
		t.Errorf("a later process: %+v, %v, %v; want %+v", got, found, err, web)
	}
	pause := Info{ContainerID: "sandbox-" + web.Pod, PodUID: web.PodUID, Namespace: web.Namespace, Pod: web.Pod, Labels: web.Labels}
	if got, found, err := r.Resolve(ctx, pause.ContainerID, ""); err != nil || !found || !reflect.DeepEqual(got, pause) {
		t.Errorf("its sandbox: %+v, %v, %v; want %+v", got, found, err, pause)
	}
	if n, s := f.calls.Load(), f.statusCalls.Load(); n != 1 || s != 1 {
		t.Errorf("hits listed %d times and asked ContainerStatus %d times; want 1 and 1", n, s)
	}
	if n := testutil.ToFloat64(m.criStatuses.WithLabelValues("ok")); n != 1 {
		t.Errorf("ok status lookups = %v, want 1", n)
	}
}

// TestCRIResolverStatusNotFound: an ID the runtime does not know (a host
// process's, a sandbox started since the listing) is a plain miss, without
// an error, and the cache keeps it for NegativeTTL.
func TestCRIResolverStatusNotFound(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "cri.sock")
	f := &fakeRuntimeService{}
	f.serve(t, socket)
	r, m, _ := newTestCRI(t, socket)
	c, err := newCache(r, 16, 5*time.Second, m)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_700_000_000, 0)
	c.now = func() time.Time { return now }
	ctx := context.Background()
	r.Resolve(ctx, cidA, "") // the listing

	for i := range 3 {
		if got, found, err := c.Resolve(ctx, cidB, ""); err != nil || found || !reflect.DeepEqual(got, Info{}) {
			t.Fatalf("resolve %d: %+v, %v, %v; want a miss", i, got, found, err)
		}
	}
	if n := f.statusCalls.Load(); n != 1 {
		t.Errorf("asked ContainerStatus %d times, want 1 (the miss is cached)", n)
	}
	now = now.Add(5 * time.Second)
	c.Resolve(ctx, cidB, "")
	if n := f.statusCalls.Load(); n != 2 {
		t.Errorf("after NegativeTTL asked ContainerStatus %d times, want 2", n)
	}
	if n := testutil.ToFloat64(m.criStatuses.WithLabelValues("not_found")); n != 2 {
		t.Errorf("not_found status lookups = %v, want 2", n)
	}
	if _, ok := r.lookup(cidB); ok {
		t.Error("a NotFound ID was indexed")
	}
}

// TestCRIResolverStatusLimited: a flood of unknown IDs asks ContainerStatus
// at most StatusLookupRate times a second; the rest are plain misses.
func TestCRIResolverStatusLimited(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "cri.sock")
	f := &fakeRuntimeService{}
	f.serve(t, socket)
	r, m, now := newTestCRI(t, socket) // StatusLookupRate: 50
	ctx := context.Background()
	r.Resolve(ctx, cidA, "") // the listing

	id := func(i int) string { return fmt.Sprintf("%064x", i) }
	for i := range 80 {
		if _, found, err := r.Resolve(ctx, id(i), ""); err != nil || found {
			t.Fatalf("unknown ID %d: %v, %v", i, found, err)
		}
	}
	if n := f.statusCalls.Load(); n != 50 {
		t.Fatalf("80 misses asked ContainerStatus %d times, want the burst of 50", n)
	}
	*now = now.Add(100 * time.Millisecond)
	for i := range 20 {
		r.Resolve(ctx, id(100+i), "")
	}
	if n := f.statusCalls.Load(); n != 55 {
		t.Errorf("100 ms later asked ContainerStatus %d times in all, want 55", n)
	}
	if n := f.calls.Load(); n != 1 {
		t.Errorf("listed %d times, want 1", n)
	}
	if n := testutil.ToFloat64(m.criStatuses.WithLabelValues("limited")); n != 45 {
		t.Errorf("limited status lookups = %v, want 45", n)
	}

	cfg := Default()
	cfg.StatusLookupRate = -1
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "status lookup rate -1") {
		t.Errorf("Validate() with a negative status lookup rate = %v", err)
	}
}

// TestCRIResolverStatusErrors: a ContainerStatus error, and its sandbox's
// listing failing, are errors naming the call, counted; nothing is
// indexed, so a later lookup asks again.
func TestCRIResolverStatusErrors(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "cri.sock")
	f := &fakeRuntimeService{}
	f.serve(t, socket)
	r, m, _ := newTestCRI(t, socket)
	ctx := context.Background()
	r.Resolve(ctx, cidA, "") // the listing

	f.set(kubeContainer(infoB))
	f.setSandboxes(kubeSandbox(infoB))
	f.failStatus(errors.New("store locked"))
	if _, found, err := r.Resolve(ctx, cidB, ""); found || err == nil ||
		!strings.Contains(err.Error(), "getting CRI container status of "+cidB+" at "+socket) || !strings.Contains(err.Error(), "store locked") {
		t.Fatalf("Resolve() = %v, %v; want the ContainerStatus error", found, err)
	}
	f.failStatus(nil)
	f.failSandboxes(errors.New("sandbox store locked"))
	if _, found, err := r.Resolve(ctx, cidB, ""); found || err == nil ||
		!strings.Contains(err.Error(), "listing CRI pod sandboxes of pod "+uidB) || !strings.Contains(err.Error(), "sandbox store locked") {
		t.Fatalf("Resolve() = %v, %v; want the sandbox listing's error", found, err)
	}
	if _, ok := r.lookup(cidB); ok {
		t.Error("a container was indexed without its pod's labels")
	}
	if n := testutil.ToFloat64(m.criStatuses.WithLabelValues("error")); n != 2 {
		t.Errorf("error status lookups = %v, want 2", n)
	}
	f.failSandboxes(nil)
	if got, found, err := r.Resolve(ctx, cidB, ""); err != nil || !found || !reflect.DeepEqual(got, infoB) {
		t.Fatalf("after recovery: %+v, %v, %v; want %+v", got, found, err, infoB)
	}
}

// TestCRIResolverSandboxes: a listing indexes each pod sandbox as its pod
// with no container, so that the pause process resolves.
func TestCRIResolverSandboxes(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "cri.sock")
	f := &fakeRuntimeService{}
	web := infoA
	web.Labels = map[string]string{"app": "web"}
	bare := kubeSandbox(infoB) // only metadata, as a runtime without the kubelet's labels
	bare.Id, bare.Labels = strings.ToUpper(strings.Repeat("e", 64)), nil
	f.set(kubeContainer(web))
	f.setSandboxes(kubeSandbox(web), bare, &runtimeapi.PodSandbox{})
	f.serve(t, socket)
	r, _, _ := newTestCRI(t, socket)
	ctx := context.Background()
	for _, want := range []Info{
		{ContainerID: "sandbox-" + web.Pod, PodUID: web.PodUID, Namespace: web.Namespace, Pod: web.Pod, Labels: web.Labels},
		{ContainerID: strings.Repeat("e", 64), PodUID: infoB.PodUID, Namespace: infoB.Namespace, Pod: infoB.Pod},
		web,
	} {
		got, found, err := r.Resolve(ctx, want.ContainerID, "")
		if err != nil || !found || !reflect.DeepEqual(got, want) {
			t.Errorf("Resolve(%s) = %+v, %v, %v; want %+v", want.ContainerID, got, found, err, want)
		}
	}
	if n := len(r.byID); n != 3 {
		t.Errorf("indexed %d IDs, want 3 (a sandbox without an ID is skipped)", n)
	}
}

func TestPodSandbox(t *testing.T) {
	sb := func(id string, ready bool, created int64) *runtimeapi.PodSandbox {
		s := &runtimeapi.PodSandbox{Id: id, CreatedAt: created, State: runtimeapi.PodSandboxState_SANDBOX_NOTREADY}
		if ready {
			s.State = runtimeapi.PodSandboxState_SANDBOX_READY
		}
		return s
	}
	tests := []struct {
		name string
		in   []*runtimeapi.PodSandbox
		want string
	}{
		{"none", nil, ""},
		{"only without an ID", []*runtimeapi.PodSandbox{sb("", true, 1)}, ""},
		{"ready over newer", []*runtimeapi.PodSandbox{sb("old", true, 1), sb("new", false, 2)}, "old"},
		{"newest of the ready", []*runtimeapi.PodSandbox{sb("a", true, 1), sb("b", true, 3), sb("c", true, 2)}, "b"},
		{"newest of the not ready", []*runtimeapi.PodSandbox{sb("a", false, 2), sb("b", false, 1)}, "a"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := podSandbox(tt.in).GetId(); got != tt.want {
				t.Errorf("podSandbox() = %q, want %q", got, tt.want)
			}
		})
	}
}
