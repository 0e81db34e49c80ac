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

// criMaxMessage is the kubelet's own limit for CRI responses: a node with
// many containers answers ListContainers with more than gRPC's default 4 MiB.
const criMaxMessage = 16 << 20

// criResolver keeps the CRI runtime's container list, indexed by ID. A miss
// lists every container again, at most once per MissRefreshInterval; run
// lists them on an interval so that removed containers leave the index.
type criResolver struct {
	socket  string
	timeout time.Duration
	conn    *grpc.ClientConn
	client  runtimeapi.RuntimeServiceClient
	limiter *rate.Limiter
	log     zerolog.Logger
	metrics *metrics
	now     func() time.Time

	refreshMu sync.Mutex // one listing at a time; guards failing
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
		socket:  cfg.CRISocket,
		timeout: cfg.CRITimeout,
		conn:    conn,
		client:  runtimeapi.NewRuntimeServiceClient(conn),
		limiter: rate.NewLimiter(limit, 1),
		log:     log.With().Str("criSocket", cfg.CRISocket).Logger(),
		metrics: m,
		now:     time.Now,
		byID:    map[string]Info{},
	}, nil
}

func (r *criResolver) lookup(containerID string) (Info, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	info, ok := r.byID[strings.ToLower(containerID)]
	return info, ok
}

// Resolve answers from the last listing; on a miss it lists again unless a
// listing was made for a miss within MissRefreshInterval.
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
		return Info{}, false, nil
	}
	if err := r.refreshLocked(ctx); err != nil {
		return Info{}, false, err
	}
	info, ok := r.lookup(containerID)
	return info, ok, nil
}

// refresh lists every container and replaces the index.
func (r *criResolver) refresh(ctx context.Context) error {
	r.refreshMu.Lock()
	defer r.refreshMu.Unlock()
	return r.refreshLocked(ctx)
}

func (r *criResolver) refreshLocked(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	resp, err := r.client.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
	if err != nil {
		r.metrics.criRefresh("error")
		err = fmt.Errorf("listing CRI containers at %s: %w", r.socket, err)
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
	byID := make(map[string]Info, len(resp.GetContainers()))
	for _, c := range resp.GetContainers() {
		if c.GetId() == "" {
			continue
		}
		info := infoFromCRI(c)
		byID[info.ContainerID] = info
	}
	r.mu.Lock()
	r.byID = byID
	r.mu.Unlock()
	return nil
}

// infoFromCRI reads the kubelet's labels, and the container's metadata name
// when the container-name label is missing.
func infoFromCRI(c *runtimeapi.Container) Info {
	l := c.GetLabels()
	info := Info{
		ContainerID: strings.ToLower(c.GetId()),
		PodUID:      l[labelPodUID],
		Namespace:   l[labelPodNamespace],
		Pod:         l[labelPodName],
		Container:   l[labelContainerName],
	}
	if info.Container == "" {
		info.Container = c.GetMetadata().GetName()
	}
	return info
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
