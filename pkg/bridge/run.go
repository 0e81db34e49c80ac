package bridge

import (
	"context"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Run validates cfg, assembles the bridge (metrics, the optional pod
// lookup, the mutator, its handler and server) and serves until ctx ends.
func Run(ctx context.Context, cfg Config, log zerolog.Logger) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m, err := NewMetrics(reg)
	if err != nil {
		return err
	}
	var pods PodSource
	if cfg.PodLookup {
		rc, err := restConfig(cfg.Kubeconfig)
		if err != nil {
			return fmt.Errorf("configuring --pod-lookup: %w", err)
		}
		get, err := NewGetPod(rc)
		if err != nil {
			return fmt.Errorf("configuring --pod-lookup: %w", err)
		}
		pods = NewPodCache(get, cfg.PodCacheSize, cfg.PodCacheTTL, cfg.LookupTimeout)
	}
	mut, err := NewMutator(cfg.Key, nil, pods)
	if err != nil {
		return err
	}
	h := NewHandler(mut, cfg.MaxBodyBytes, log, m)
	srv, err := NewServer(cfg, h, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), log, m)
	if err != nil {
		return err
	}
	log.Info().Str("key", cfg.Key).Bool("pod_lookup", cfg.PodLookup).Msg("exec bridge starting")
	return srv.Run(ctx)
}

// restConfig is the pod lookup's apiserver client: the kubeconfig when one
// is given (the bridge run outside the cluster, or a test), else the
// in-cluster service account.
func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig != "" {
		return clientcmd.BuildConfigFromFlags("", kubeconfig)
	}
	return rest.InClusterConfig()
}
