package elasticsearch

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/execid/correlator/internal/esdouble"
	"github.com/execid/correlator/pkg/store"
	"github.com/execid/correlator/pkg/store/storetest"
)

func openDouble(t testing.TB, d *esdouble.Double, cfg Config) *Store {
	t.Helper()
	cfg.URLs = []string{d.URL()}
	if cfg.RetryInitial == 0 {
		cfg.RetryInitial = time.Millisecond
	}
	s, err := Open(context.Background(), cfg, zerolog.Nop(), nil)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return s
}

// TestContractDouble runs the backend contract against the Elasticsearch
// protocol double.
func TestContractDouble(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Backend {
		return openDouble(t, esdouble.New(t), Config{SessionProcessLimit: storetest.SessionProcessLimit})
	})
}

var realPrefix atomic.Int64

// clusterURLs are the opt-in real cluster's addresses, from
// CORRELATOR_TEST_ES_URL (comma-separated); it skips t when that is unset.
func clusterURLs(t *testing.T) []string {
	t.Helper()
	url := os.Getenv("CORRELATOR_TEST_ES_URL")
	if url == "" {
		t.Skip("set CORRELATOR_TEST_ES_URL (and optionally CORRELATOR_TEST_ES_API_KEY) to run against a real Elasticsearch")
	}
	return strings.Split(url, ",")
}

// clusterConfig configures the real cluster under an index prefix of t's
// own, whose indices, data stream, templates and policy are deleted after
// t. Nothing is created yet.
func clusterConfig(t *testing.T) Config {
	t.Helper()
	prefix := fmt.Sprintf("correlator-test-%d-%d", time.Now().UnixNano(), realPrefix.Add(1))
	cfg := Config{
		URLs: clusterURLs(t), APIKey: os.Getenv("CORRELATOR_TEST_ES_API_KEY"),
		IndexPrefix: prefix, Refresh: "wait_for", SessionProcessLimit: storetest.SessionProcessLimit,
	}
	c, err := dial(cfg.withDefaults())
	if err != nil {
		t.Fatalf("dialing: %v", err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		for _, p := range []string{"/" + prefix + "-sessions," + prefix + "-processes," + prefix + "-audit",
			"/_data_stream/" + prefix + "-alerts", "/_index_template/" + prefix + "-*", "/_ilm/policy/" + prefix + "-alerts"} {
			_ = c.do(ctx, "DELETE", p, nil, nil, nil)
		}
	})
	return cfg
}

// TestContractCluster runs the contract against a real cluster when
// CORRELATOR_TEST_ES_URL is set (CORRELATOR_TEST_ES_API_KEY optional),
// each subtest under its own index prefix, deleted afterwards.
func TestContractCluster(t *testing.T) {
	clusterURLs(t)
	storetest.Run(t, func(t *testing.T) store.Backend {
		s, err := Open(context.Background(), clusterConfig(t), zerolog.Nop(), nil)
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		return s
	})
}
