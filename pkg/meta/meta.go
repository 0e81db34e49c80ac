// Package meta resolves a container ID (and the pod UID parsed from its
// cgroup path) to the pod UID, namespace, pod name, container name and pod
// labels.
//
// Sources are tried in a fixed order: a static mapping file (--pod-map, for
// bare runc and tests), the CRI runtime socket (ListContainers labels,
// joined to ListPodSandbox labels for the pod's own; ContainerStatus for a
// container started since the last listing), and last the pod UID
// from the cgroup path alone. Results are kept in a bounded LRU cache;
// misses and partial answers are cached briefly.
package meta

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// Info is what is known about one container.
type Info struct {
	ContainerID string `json:"containerID"`
	PodUID      string `json:"podUID"`
	Namespace   string `json:"namespace"`
	Pod         string `json:"pod"`
	Container   string `json:"container"`
	// Labels are the pod's own labels (app, team, ...); nil when none are
	// known. From the CRI they are the pod sandbox's without the
	// kubelet's io.kubernetes.* (see podLabels), as the kubelet set them
	// when it created the pod: it does not pass later label changes to
	// the runtime. From the pod map they are the entry's, verbatim. The
	// map is shared between answers: read it, never write it.
	Labels map[string]string `json:"labels,omitempty"`
}

// complete reports whether Info names the pod, not just its UID.
func (i Info) complete() bool { return i.Namespace != "" && i.Pod != "" }

// Resolver resolves a container. found is false when the source does not know
// the container; err reports a source that could not be asked (a CRI socket
// that is down), and is never fatal to the caller.
type Resolver interface {
	Resolve(ctx context.Context, containerID, podUID string) (info Info, found bool, err error)
}

// DefaultCRISocket is containerd's CRI socket. A DaemonSet mounts it under
// /host and sets Config.CRISocket to /host/run/containerd/containerd.sock.
const DefaultCRISocket = "/run/containerd/containerd.sock"

// Config configures New. A zero field takes its value from Default.
type Config struct {
	// PodMapPath is a static JSON or YAML list of Info (labels
	// included). Empty disables it.
	PodMapPath string `json:"podMapPath"`
	// CRISocket is the path of the CRI runtime's unix socket. Empty
	// disables CRI lookups.
	CRISocket string `json:"criSocket"`
	// CacheSize bounds the number of cached containers.
	CacheSize int `json:"cacheSize"`
	// RefreshInterval is how often Run lists every CRI container and pod
	// sandbox.
	RefreshInterval time.Duration `json:"refreshInterval"`
	// MissRefreshInterval is the least time between two CRI listings
	// caused by misses.
	MissRefreshInterval time.Duration `json:"missRefreshInterval"`
	// StatusLookupRate is the most CRI lookups of one container
	// (ContainerStatus, then its pod's sandbox) a second, made for misses
	// that MissRefreshInterval keeps from listing; as many may be made at
	// once.
	StatusLookupRate int `json:"statusLookupRate"`
	// NegativeTTL is how long a miss, or an answer with only the pod UID,
	// stays cached before the sources are asked again.
	NegativeTTL time.Duration `json:"negativeTTL"`
	// CRITimeout bounds one CRI listing (ListContainers and
	// ListPodSandbox together), and one lookup of one container
	// (ContainerStatus and ListPodSandbox together).
	CRITimeout time.Duration `json:"criTimeout"`
}

// Default returns the defaults: no pod map, no CRI socket, 4096 cached
// containers.
func Default() Config {
	return Config{
		CacheSize:           4096,
		RefreshInterval:     time.Minute,
		MissRefreshInterval: time.Second,
		StatusLookupRate:    50,
		NegativeTTL:         5 * time.Second,
		CRITimeout:          5 * time.Second,
	}
}

// withDefaults fills the zero fields from Default.
func (c Config) withDefaults() Config {
	d := Default()
	c.CacheSize = cmp.Or(c.CacheSize, d.CacheSize)
	c.RefreshInterval = cmp.Or(c.RefreshInterval, d.RefreshInterval)
	c.MissRefreshInterval = cmp.Or(c.MissRefreshInterval, d.MissRefreshInterval)
	c.StatusLookupRate = cmp.Or(c.StatusLookupRate, d.StatusLookupRate)
	c.NegativeTTL = cmp.Or(c.NegativeTTL, d.NegativeTTL)
	c.CRITimeout = cmp.Or(c.CRITimeout, d.CRITimeout)
	return c
}

// Validate checks the configuration after zero fields take their defaults.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	if c.CacheSize < 0 {
		errs = append(errs, fmt.Errorf("meta cache size %d: must be positive", c.CacheSize))
	}
	if c.StatusLookupRate < 0 {
		errs = append(errs, fmt.Errorf("meta status lookup rate %d: must be positive", c.StatusLookupRate))
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"refresh interval", c.RefreshInterval},
		{"miss refresh interval", c.MissRefreshInterval},
		{"negative TTL", c.NegativeTTL},
		{"CRI timeout", c.CRITimeout},
	} {
		if d.v < 0 {
			errs = append(errs, fmt.Errorf("meta %s %s: must be positive", d.name, d.v))
		}
	}
	return errors.Join(errs...)
}

// Service is the composed, cached resolver.
type Service struct {
	cache  *cache
	podMap *podMapFile
	cri    *criResolver
	cfg    Config
	log    zerolog.Logger
}

// New builds the resolver chain from cfg. A pod map that cannot be read or
// parsed is an error; a CRI socket that is down is not (lookups report it
// and fall back). reg may be nil.
func New(cfg Config, log zerolog.Logger, reg prometheus.Registerer) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	log = log.With().Str("component", "meta").Logger()
	m, err := newMetrics(reg)
	if err != nil {
		return nil, fmt.Errorf("registering meta metrics: %w", err)
	}
	s := &Service{cfg: cfg, log: log}
	var sources []source
	if cfg.PodMapPath != "" {
		if s.podMap, err = loadPodMapFile(cfg.PodMapPath, log); err != nil {
			return nil, err
		}
		sources = append(sources, source{"podmap", s.podMap})
	}
	if cfg.CRISocket != "" {
		if s.cri, err = newCRIResolver(cfg, log, m); err != nil {
			return nil, err
		}
		sources = append(sources, source{"cri", s.cri})
	}
	sources = append(sources, source{"cgroup", CgroupFallback{}})
	s.cache, err = newCache(newChain(log, m, sources...), cfg.CacheSize, cfg.NegativeTTL, m)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// Resolve resolves a container through the cache and the sources in order.
func (s *Service) Resolve(ctx context.Context, containerID, podUID string) (Info, bool, error) {
	return s.cache.Resolve(ctx, containerID, podUID)
}

// Run lists the CRI containers and pod sandboxes now and every
// RefreshInterval until ctx is done, so that containers that are gone leave
// the index. Failures are logged, not returned. Without a CRI socket it
// returns at once. Resolve works without Run: a miss lists the containers.
func (s *Service) Run(ctx context.Context) {
	if s.cri == nil {
		return
	}
	s.cri.run(ctx, s.cfg.RefreshInterval)
}

// Close closes the CRI connection.
func (s *Service) Close() error {
	if s.cri == nil {
		return nil
	}
	return s.cri.close()
}
