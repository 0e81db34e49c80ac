package meta

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The labels the kubelet sets on every container it creates through CRI.
const (
	labelPodUID        = "io.kubernetes.pod.uid"
	labelPodNamespace  = "io.kubernetes.pod.namespace"
	labelPodName       = "io.kubernetes.pod.name"
	labelContainerName = "io.kubernetes.container.name"
)

// The sandbox labels that are not the pod's own (see podLabels).
const (
	kubeletLabelPrefix    = "io.kubernetes."
	annotationLabelPrefix = "annotation."
)

// criMaxMessage is the kubelet's own limit for CRI responses: a node with
// many containers answers ListContainers with more than gRPC's default 4 MiB.
const criMaxMessage = 16 << 20

// criResolver keeps the CRI runtime's containers and pod sandboxes,
// indexed by ID, each container with its pod sandbox's labels. A miss lists
// every container and sandbox again (one call each), at most once per
// MissRefreshInterval; a miss that may not list asks the runtime about that
// one container instead (see resolveOne), at most StatusLookupRate times a
// second. run lists on an interval so that removed containers leave the
// index.
type criResolver struct {
	socket        string
	timeout       time.Duration
	conn          *grpc.ClientConn
	client        runtimeapi.RuntimeServiceClient
	limiter       *rate.Limiter // listings caused by misses
	statusLimiter *rate.Limiter // ContainerStatus lookups
	log           zerolog.Logger
	metrics       *metrics
	now           func() time.Time

	refreshMu sync.Mutex // one listing or lookup at a time; guards failing
	failing   bool       // the last listing failed
	mu        sync.RWMutex
	byID      map[string]Info
}

func newCRIResolver(cfg Config, log zerolog.Logger, m *metrics) (*criResolver, error) {
	// grpc.NewClient does not connect: a runtime that is down is reported
	// by the first listing, not here. Reconnects back off to at most 5 s so
	// that a restarted runtime is seen again soon.
	conn, err := grpc.NewClient("unix:"+cfg.CRISocket,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(criMaxMessage)),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 5 * time.Second},
			MinConnectTimeout: cfg.CRITimeout,
		}),
	)
	if err != nil {
		return nil, fmt.Errorf("creating CRI client for %s: %w", cfg.CRISocket, err)
	}
	limit := rate.Inf
	if cfg.MissRefreshInterval > 0 {
		limit = rate.Every(cfg.MissRefreshInterval)
	}
	return &criResolver{
		socket:        cfg.CRISocket,
		timeout:       cfg.CRITimeout,
		conn:          conn,
		client:        runtimeapi.NewRuntimeServiceClient(conn),
		limiter:       rate.NewLimiter(limit, 1),
		statusLimiter: rate.NewLimiter(rate.Limit(cfg.StatusLookupRate), cfg.StatusLookupRate),
		log:           log.With().Str("criSocket", cfg.CRISocket).Logger(),
		metrics:       m,
		now:           time.Now,
		byID:          map[string]Info{},
	}, nil
}

func (r *criResolver) lookup(containerID string) (Info, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	info, ok := r.byID[strings.ToLower(containerID)]
	return info, ok
}

// Resolve answers from the index; on a miss it lists again unless a listing
// was made for a miss within MissRefreshInterval, and otherwise asks the
// runtime about the one container. A container started just after a listing
// is thus known at once, not after the cache's NegativeTTL.
func (r *criResolver) Resolve(ctx context.Context, containerID, _ string) (Info, bool, error) {
	if containerID == "" {
		return Info{}, false, nil
	}
	if info, ok := r.lookup(containerID); ok {
		return info, true, nil
	}
	r.refreshMu.Lock()
	defer r.refreshMu.Unlock()
	// A listing made while we waited may have brought the container.
	if info, ok := r.lookup(containerID); ok {
		return info, true, nil
	}
	if !r.limiter.AllowN(r.now(), 1) {
		r.metrics.criRefresh("limited")
		return r.resolveOneLocked(ctx, containerID)
	}
	if err := r.refreshLocked(ctx); err != nil {
		return Info{}, false, err
	}
	info, ok := r.lookup(containerID)
	return info, ok, nil
}

// refresh lists every container and pod sandbox and replaces the index.
func (r *criResolver) refresh(ctx context.Context) error {
	r.refreshMu.Lock()
	defer r.refreshMu.Unlock()
	return r.refreshLocked(ctx)
}

func (r *criResolver) refreshLocked(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	byID, err := r.list(ctx)
	if err != nil {
		r.metrics.criRefresh("error")
		if !r.failing && ctx.Err() == nil {
			r.log.Warn().Err(err).Msg("CRI runtime unavailable; containers resolve to the cgroup pod UID only")
		}
		r.failing = true
		return err
	}
	r.metrics.criRefresh("ok")
	if r.failing {
		r.log.Info().Msg("CRI runtime available again")
		r.failing = false
	}
	r.mu.Lock()
	r.byID = byID
	r.mu.Unlock()
	return nil
}

// list lists the containers, then the pod sandboxes, and joins them. In
// that order a listed container's sandbox is in the second list unless it
// was removed in between (and the container with it); the other way round
// a container started between the calls would lack its pod's labels. A
// runtime that answers one list and not the other is an error: the index
// and what was cached from it stay as they were, rather than taking
// containers without their labels for good.
func (r *criResolver) list(ctx context.Context) (map[string]Info, error) {
	cs, err := r.client.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
	if err != nil {
		return nil, fmt.Errorf("listing CRI containers at %s: %w", r.socket, err)
	}
	ps, err := r.client.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return nil, fmt.Errorf("listing CRI pod sandboxes at %s: %w", r.socket, err)
	}
	return indexCRI(cs.GetContainers(), ps.GetItems()), nil
}

// indexCRI indexes containers and pod sandboxes by lowercased ID, each
// container with the labels of its pod sandbox (by PodSandboxId). A sandbox
// is indexed as its pod with Container "" (the pause process's cgroup names
// the sandbox ID), the same as a pod-map entry without a container. The
// containers of one pod and its sandbox share one labels map. A container
// and a sandbox with one ID (none is expected) index the container.
func indexCRI(containers []*runtimeapi.Container, sandboxes []*runtimeapi.PodSandbox) map[string]Info {
	byID := make(map[string]Info, len(containers)+len(sandboxes))
	labels := make(map[string]map[string]string, len(sandboxes))
	for _, s := range sandboxes {
		if s.GetId() == "" {
			continue
		}
		info := infoFromSandbox(s)
		labels[s.GetId()] = info.Labels
		byID[info.ContainerID] = info
	}
	for _, c := range containers {
		if c.GetId() == "" {
			continue
		}
		info := infoFromCRI(c.GetId(), c.GetLabels(), c.GetMetadata().GetName())
		info.Labels = labels[c.GetPodSandboxId()]
		byID[info.ContainerID] = info
	}
	return byID
}

// infoFromCRI reads a container's kubelet labels, and its metadata name
// when the container-name label is missing. Both a listed container and a
// ContainerStatus answer carry them.
func infoFromCRI(id string, l map[string]string, metadataName string) Info {
	info := Info{
		ContainerID: strings.ToLower(id),
		PodUID:      l[labelPodUID],
		Namespace:   l[labelPodNamespace],
		Pod:         l[labelPodName],
		Container:   l[labelContainerName],
	}
	if info.Container == "" {
		info.Container = metadataName
	}
	return info
}

// infoFromSandbox reads a pod sandbox's kubelet labels, falling back to its
// metadata, and its pod's own labels (podLabels). Container is "".
func infoFromSandbox(s *runtimeapi.PodSandbox) Info {
	l, md := s.GetLabels(), s.GetMetadata()
	info := Info{
		ContainerID: strings.ToLower(s.GetId()),
		PodUID:      l[labelPodUID],
		Namespace:   l[labelPodNamespace],
		Pod:         l[labelPodName],
		Labels:      podLabels(l),
	}
	if info.PodUID == "" {
		info.PodUID = md.GetUid()
	}
	if info.Namespace == "" {
		info.Namespace = md.GetNamespace()
	}
	if info.Pod == "" {
		info.Pod = md.GetName()
	}
	return info
}

// podLabels returns a pod's own labels from its sandbox's: the kubelet
// copies the Pod's labels onto the sandbox config and adds its own
// io.kubernetes.pod.{name,namespace,uid}. Every label is kept except those
// under io.kubernetes. (the kubelet's, cri-dockerd's io.kubernetes.docker.*
// too) and annotation. (how dockershim-era runtimes stored annotations as
// labels). nil when nothing is left.
func podLabels(sandbox map[string]string) map[string]string {
	var out map[string]string
	for k, v := range sandbox {
		if strings.HasPrefix(k, kubeletLabelPrefix) || strings.HasPrefix(k, annotationLabelPrefix) {
			continue
		}
		if out == nil {
			out = make(map[string]string, len(sandbox))
		}
		out[k] = v
	}
	return out
}

// run lists now and every interval until ctx is done. A zero interval lists
// once. Failures are logged by refreshLocked when the runtime goes away.
func (r *criResolver) run(ctx context.Context, interval time.Duration) {
	r.refresh(ctx)
	if interval <= 0 {
		return
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r.refresh(ctx)
		}
	}
}

func (r *criResolver) close() error {
	if err := r.conn.Close(); err != nil {
		return fmt.Errorf("closing CRI connection to %s: %w", r.socket, err)
	}
	return nil
}
