package elasticsearch

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/execid/correlator/internal/escluster"
	"github.com/execid/correlator/pkg/store"
	"github.com/execid/correlator/pkg/store/storetest"
)

var realPrefix atomic.Int64

// clusterConfig configures the real cluster (escluster.Shared: the
// three-node cluster the tests start, or CORRELATOR_TEST_ES_URL's) under
// an index prefix of t's own, whose indices and templates are deleted
// after t. Nothing is created yet.
func clusterConfig(t testing.TB) Config {
	t.Helper()
	cl := escluster.Shared(t)
	prefix := fmt.Sprintf("ct-%d-%d", time.Now().UnixNano(), realPrefix.Add(1))
	cfg := Config{
		URLs: cl.URLs(), APIKey: os.Getenv(escluster.EnvAPIKey),
		IndexPrefix: prefix, Refresh: "wait_for", SessionProcessLimit: storetest.SessionProcessLimit,
		RetryInitial: 10 * time.Millisecond,
	}
	c, err := dial(cfg.withDefaults())
	if err != nil {
		t.Fatalf("dialing: %v", err)
	}
	t.Cleanup(func() { dropPrefix(c, prefix) })
	return cfg
}

// dropPrefix deletes what a store of prefix made.
func dropPrefix(c *conn, prefix string) {
	ctx := context.Background()
	for _, p := range []string{"/" + prefix + "-*?expand_wildcards=all", "/_data_stream/" + prefix + "-*",
		"/_index_template/" + prefix + "-*"} {
		_ = c.do(ctx, "DELETE", p, nil, nil, nil)
	}
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
