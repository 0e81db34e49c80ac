package elasticsearch

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/execid/correlator/internal/escluster"
	"github.com/execid/correlator/pkg/store"
	"github.com/execid/correlator/pkg/store/storetest"
)

// clusterConfig configures the real cluster (escluster.Shared: the
// three-node cluster the tests start, or CORRELATOR_TEST_ES_URL's) under
// an index prefix of t's own, whose indices and templates are deleted
// after t. Nothing is created yet.
func clusterConfig(t testing.TB) Config {
	t.Helper()
	cl := escluster.Shared(t)
	prefix := escluster.Prefix(t, cl)
	cfg := Config{
		URLs: cl.URLs(), APIKey: os.Getenv(escluster.EnvAPIKey),
		IndexPrefix: prefix, Refresh: "wait_for", SessionProcessLimit: storetest.SessionProcessLimit,
		RetryInitial: 10 * time.Millisecond,
	}
	return cfg
}

func openCluster(t testing.TB, cfg Config) *Store {
	t.Helper()
	s, err := Open(context.Background(), cfg, zerolog.Nop(), nil)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return s
}

// TestContractCluster runs the backend contract against the real
// three-node cluster, each subtest under its own index prefix. Retention's
// fixtures lie seconds apart, so its store partitions by the minute.
func TestContractCluster(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Backend {
		return openCluster(t, clusterConfig(t))
	}, storetest.Options{OpenForRetention: func(t *testing.T) store.Backend {
		cfg := clusterConfig(t)
		cfg.IndexPeriod = time.Minute
		return openCluster(t, cfg)
	}})
}
