package meta

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	tu "github.com/execid/correlator/internal/testutil"
)

// fakeRuntimeService is a test double of a CRI runtime: a real gRPC
// RuntimeService that implements only ListContainers, ListPodSandbox (its
// ID, state and label filters) and ContainerStatus, from settable lists.
// sandboxErr, when set, fails ListPodSandbox; statusErr ContainerStatus.
type fakeRuntimeService struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	mu           sync.Mutex
	containers   []*runtimeapi.Container
	sandboxes    []*runtimeapi.PodSandbox
	sandboxErr   error
	statusErr    error
	calls        atomic.Int64 // ListContainers
	sandboxCalls atomic.Int64 // ListPodSandbox
	statusCalls  atomic.Int64 // ContainerStatus
}

func (f *fakeRuntimeService) ListContainers(context.Context, *runtimeapi.ListContainersRequest) (*runtimeapi.ListContainersResponse, error) {
	f.calls.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	return &runtimeapi.ListContainersResponse{Containers: append([]*runtimeapi.Container(nil), f.containers...)}, nil
}

func (f *fakeRuntimeService) ListPodSandbox(_ context.Context, req *runtimeapi.ListPodSandboxRequest) (*runtimeapi.ListPodSandboxResponse, error) {
	f.sandboxCalls.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.sandboxErr != nil {
		return nil, f.sandboxErr
	}
	filter := req.GetFilter()
	var items []*runtimeapi.PodSandbox
	for _, s := range f.sandboxes {
		if filter.GetId() != "" && s.GetId() != filter.GetId() ||
			filter.GetState() != nil && s.GetState() != filter.GetState().GetState() {
			continue
		}
		match := true
		for k, v := range filter.GetLabelSelector() {
			if got, ok := s.GetLabels()[k]; !ok || got != v {
				match = false
			}
		}
		if match {
			items = append(items, s)
		}
	}
	return &runtimeapi.ListPodSandboxResponse{Items: items}, nil
}

// ContainerStatus answers as containerd does: NotFound for an ID it does
// not know, which includes a sandbox's.
func (f *fakeRuntimeService) ContainerStatus(_ context.Context, req *runtimeapi.ContainerStatusRequest) (*runtimeapi.ContainerStatusResponse, error) {
	f.statusCalls.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.statusErr != nil {
		return nil, f.statusErr
	}
	for _, c := range f.containers {
		if c.GetId() == req.GetContainerId() {
			return &runtimeapi.ContainerStatusResponse{Status: &runtimeapi.ContainerStatus{
				Id: c.GetId(), Metadata: c.GetMetadata(), State: c.GetState(), Labels: c.GetLabels(),
			}}, nil
		}
	}
	return nil, status.Errorf(codes.NotFound, "container %q: not found", req.GetContainerId())
}

func (f *fakeRuntimeService) set(cs ...*runtimeapi.Container) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.containers = cs
}

func (f *fakeRuntimeService) setSandboxes(ps ...*runtimeapi.PodSandbox) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sandboxes = ps
}

func (f *fakeRuntimeService) failStatus(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.statusErr = err
}

func (f *fakeRuntimeService) failSandboxes(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sandboxErr = err
}

// serve runs f on a unix socket at path until the test ends.
func (f *fakeRuntimeService) serve(t *testing.T, path string) {
	t.Helper()
	lis, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	runtimeapi.RegisterRuntimeServiceServer(srv, f)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
}

func kubeContainer(i Info) *runtimeapi.Container {
	return &runtimeapi.Container{
		Id:           i.ContainerID,
		PodSandboxId: "sandbox-" + i.Pod,
		Metadata:     &runtimeapi.ContainerMetadata{Name: i.Container},
		State:        runtimeapi.ContainerState_CONTAINER_RUNNING,
		Labels: map[string]string{
			labelPodUID:        i.PodUID,
			labelPodNamespace:  i.Namespace,
			labelPodName:       i.Pod,
			labelContainerName: i.Container,
		},
	}
}

// kubeSandbox is the pod sandbox the kubelet would create for i's pod: the
// pod's labels (i.Labels) plus its own io.kubernetes.pod.* ones.
func kubeSandbox(i Info) *runtimeapi.PodSandbox {
	l := map[string]string{labelPodUID: i.PodUID, labelPodNamespace: i.Namespace, labelPodName: i.Pod}
	for k, v := range i.Labels {
		l[k] = v
	}
	return &runtimeapi.PodSandbox{
		Id:       "sandbox-" + i.Pod,
		Metadata: &runtimeapi.PodSandboxMetadata{Name: i.Pod, Namespace: i.Namespace, Uid: i.PodUID},
		State:    runtimeapi.PodSandboxState_SANDBOX_READY,
		Labels:   l,
	}
}

// newTestCRI returns a CRI resolver for the socket path, with a clock the
// test moves.
func newTestCRI(t *testing.T, socket string) (*criResolver, *metrics, *time.Time) {
	t.Helper()
	m, err := newMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	cfg := Default()
	cfg.CRISocket = socket
	cfg.CRITimeout = tu.EventuallyBound // a listing should simply complete; this only stops a hang
	r, err := newCRIResolver(cfg, zerolog.Nop(), m)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.close() })
	now := time.Unix(1_700_000_000, 0)
	r.now = func() time.Time { return now }
	return r, m, &now
}

func TestCRIResolverLabels(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "cri.sock")
	f := &fakeRuntimeService{}
	noLabel := kubeContainer(infoB)
	delete(noLabel.Labels, labelContainerName)
	noLabel.Id = strings.ToUpper(infoB.ContainerID)
	f.set(kubeContainer(infoA), noLabel, &runtimeapi.Container{Id: ""})
	f.serve(t, socket)
	r, _, _ := newTestCRI(t, socket)

	ctx := context.Background()
	tests := []struct {
		name string
		cid  string
		want Info
	}{
		{"labels present", cidA, infoA},
		{"upper-case lookup", strings.ToUpper(cidA), infoA},
		{"container name from metadata, ID lowercased", cidB, infoB},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, found, err := r.Resolve(ctx, tt.cid, "")
			if err != nil || !found || !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("Resolve() = %+v, %v, %v; want %+v", got, found, err, tt.want)
			}
		})
	}
	if n := f.calls.Load(); n != 1 {
		t.Errorf("ListContainers called %d times, want 1 (later lookups hit the index)", n)
	}
}

func TestCRIResolverNotFound(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "cri.sock")
	f := &fakeRuntimeService{}
	f.set(kubeContainer(infoA))
	f.serve(t, socket)
	r, _, _ := newTestCRI(t, socket)
	got, found, err := r.Resolve(context.Background(), cidB, uidB)
	if err != nil || found || !reflect.DeepEqual(got, Info{}) {
		t.Fatalf("Resolve() = %+v, %v, %v; want not found, no error", got, found, err)
	}
	if got, found, _ := r.Resolve(context.Background(), "", uidB); found || !reflect.DeepEqual(got, Info{}) {
		t.Fatal("found a container without an ID")
	}
}

// TestCRIResolverMissesRateLimited: misses list at most once per
// MissRefreshInterval; the misses in between ask ContainerStatus instead.
func TestCRIResolverMissesRateLimited(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "cri.sock")
	f := &fakeRuntimeService{}
	f.serve(t, socket)
	r, m, now := newTestCRI(t, socket) // MissRefreshInterval: 1 s
	ctx := context.Background()

	for i := range 5 {
		if _, found, err := r.Resolve(ctx, cidA, ""); err != nil || found {
			t.Fatalf("miss %d: %v, %v", i, found, err)
		}
	}
	if n, s := f.calls.Load(), f.statusCalls.Load(); n != 1 || s != 4 {
		t.Fatalf("5 misses listed %d times and asked ContainerStatus %d times, want 1 and 4", n, s)
	}
	f.set(kubeContainer(infoA))
	if got, found, err := r.Resolve(ctx, cidA, ""); err != nil || !found || !reflect.DeepEqual(got, infoA) {
		t.Fatalf("a limited miss: %+v, %v, %v; want %+v from ContainerStatus", got, found, err, infoA)
	}
	if n := f.calls.Load(); n != 1 {
		t.Fatal("a limited miss listed the containers")
	}
	f.set(kubeContainer(infoA), kubeContainer(infoB))
	*now = now.Add(time.Second)
	if got, found, err := r.Resolve(ctx, cidB, ""); err != nil || !found || !reflect.DeepEqual(got, infoB) {
		t.Fatalf("after the limit: %+v, %v, %v", got, found, err)
	}
	if n, s := f.calls.Load(), f.statusCalls.Load(); n != 2 || s != 5 {
		t.Errorf("listed %d times and asked ContainerStatus %d times, want 2 and 5", n, s)
	}
	if n := testutil.ToFloat64(m.criRefreshes.WithLabelValues("limited")); n != 5 {
		t.Errorf("limited refreshes = %v, want 5", n)
	}
	if n := testutil.ToFloat64(m.criRefreshes.WithLabelValues("ok")); n != 2 {
		t.Errorf("ok refreshes = %v, want 2", n)
	}
	if ok, nf := testutil.ToFloat64(m.criStatuses.WithLabelValues("ok")), testutil.ToFloat64(m.criStatuses.WithLabelValues("not_found")); ok != 1 || nf != 4 {
		t.Errorf("status lookups ok = %v, not_found = %v; want 1 and 4", ok, nf)
	}
}

// TestCRIServerDown: a socket with no server is a clear error from the CRI
// source, not from New; the service falls back to the cgroup pod UID, and
// sees the runtime once it is up.
func TestCRIServerDown(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "cri.sock")
	r, m, now := newTestCRI(t, socket)
	var logs bytes.Buffer
	r.log = zerolog.New(&logs)
	ctx := context.Background()
	r.Resolve(ctx, cidA, uidA)
	*now = now.Add(time.Second)                 // past the miss rate limit
	_, found, err := r.Resolve(ctx, cidA, uidA) // a second failure logs nothing more
	if found || err == nil {
		t.Fatalf("Resolve() = %v, %v; want an error", found, err)
	}
	if msg := err.Error(); !strings.Contains(msg, "listing CRI containers at "+socket) || !strings.Contains(msg, "Unavailable") {
		t.Fatalf("error %q does not name the listing, socket and cause", msg)
	}
	if n := testutil.ToFloat64(m.criRefreshes.WithLabelValues("error")); n != 2 {
		t.Errorf("error refreshes = %v, want 2", n)
	}
	if n := strings.Count(logs.String(), "CRI runtime unavailable"); n != 1 {
		t.Errorf("logged the outage %d times, want once:\n%s", n, logs.String())
	}

	cfg := Default()
	cfg.CRISocket = socket
	s, err := New(cfg, zerolog.Nop(), nil)
	if err != nil {
		t.Fatalf("New with the runtime down: %v", err)
	}
	defer s.Close()
	got, found, err := s.Resolve(ctx, cidA, uidA)
	if err != nil || !found || !reflect.DeepEqual(got, Info{ContainerID: cidA, PodUID: uidA}) {
		t.Fatalf("service with the runtime down: %+v, %v, %v; want the cgroup answer", got, found, err)
	}

	f := &fakeRuntimeService{}
	f.set(kubeContainer(infoA))
	f.serve(t, socket)
	tu.EventuallyNil(t, func() error { // the client reconnects after its backoff
		*now = now.Add(time.Second)
		got, found, err := r.Resolve(ctx, cidA, uidA)
		if found && reflect.DeepEqual(got, infoA) {
			return nil
		}
		return fmt.Errorf("runtime up again, still %+v, %v, %v", got, found, err)
	})
	if !strings.Contains(logs.String(), "CRI runtime available again") {
		t.Errorf("recovery not logged:\n%s", logs.String())
	}
}

// TestServiceRunRefreshes: Run lists on its interval, so a container that
// went away leaves the index and a new one is known before any miss.
func TestServiceRunRefreshes(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "cri.sock")
	f := &fakeRuntimeService{}
	f.set(kubeContainer(infoA))
	f.serve(t, socket)
	s, stop := runService(t, socket)

	tu.Eventually(t, "the first listing", func() bool { _, ok := s.cri.lookup(cidA); return ok })
	f.set(kubeContainer(infoB))
	tu.Eventually(t, "the interval listing", func() bool {
		_, okA := s.cri.lookup(cidA)
		_, okB := s.cri.lookup(cidB)
		return !okA && okB
	})
	// Stop Run so that its 20ms interval cannot list while a busy machine
	// stalls us: any listing from here on is Resolve's.
	stop()
	calls := f.calls.Load()
	if got, found, err := s.Resolve(context.Background(), cidB, uidB); err != nil || !found || !reflect.DeepEqual(got, infoB) {
		t.Fatalf("Resolve() = %+v, %v, %v", got, found, err)
	}
	if f.calls.Load() != calls {
		t.Errorf("a known container caused a listing")
	}
}

// runService runs a resolver on the CRI socket, listing every 20 ms, until
// stop (or the test's end).
func runService(t *testing.T, socket string) (*Service, func()) {
	t.Helper()
	cfg := Default()
	cfg.CRISocket = socket
	cfg.RefreshInterval = 20 * time.Millisecond
	s, err := New(cfg, zerolog.Nop(), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	var once sync.Once
	stop := func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(func() { stop(); s.Close() })
	return s, stop
}
