package elasticsearch

import (
	"context"
	"net/url"
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
	c, err := dial(cfg.withDefaults())
	if err != nil {
		t.Fatalf("dialing: %v", err)
	}
	t.Cleanup(func() { dropPrefix(c, prefix) })
	return cfg
}

// dropPrefix deletes what a store of prefix made. Indices go by name: the
// cluster refuses to delete through a wildcard
// (action.destructive_requires_name), so "DELETE /<prefix>-*" deletes
// nothing.
func dropPrefix(c *conn, prefix string) {
	ctx := context.Background()
	var rows []struct {
		Index string `json:"index"`
	}
	_ = c.do(ctx, "GET", "/_cat/indices/"+prefix+"-*",
		url.Values{"format": {"json"}, "h": {"index"}, "expand_wildcards": {"all"}}, nil, &rows)
	for _, r := range rows {
		_ = c.do(ctx, "DELETE", "/"+r.Index, nil, nil, nil)
	}
	for _, p := range []string{"/_data_stream/" + prefix + "-*", "/_index_template/" + prefix + "-*"} {
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
