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

// TestContractCluster runs the contract against a real cluster when
// CORRELATOR_TEST_ES_URL is set (CORRELATOR_TEST_ES_API_KEY optional),
// each subtest under its own index prefix, deleted afterwards.
func TestContractCluster(t *testing.T) {
	url := os.Getenv("CORRELATOR_TEST_ES_URL")
	if url == "" {
		t.Skip("set CORRELATOR_TEST_ES_URL (and optionally CORRELATOR_TEST_ES_API_KEY) to run against a real Elasticsearch")
	}
	run := time.Now().UnixNano()
	storetest.Run(t, func(t *testing.T) store.Backend {
		prefix := fmt.Sprintf("correlator-test-%d-%d", run, realPrefix.Add(1))
		s, err := Open(context.Background(), Config{
			URLs: strings.Split(url, ","), APIKey: os.Getenv("CORRELATOR_TEST_ES_API_KEY"),
			IndexPrefix: prefix, Refresh: "wait_for", SessionProcessLimit: storetest.SessionProcessLimit,
		}, zerolog.Nop(), nil)
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		t.Cleanup(func() {
			ctx := context.Background()
			for _, p := range []string{"/" + prefix + "-sessions," + prefix + "-processes," + prefix + "-audit",
				"/_data_stream/" + prefix + "-alerts", "/_index_template/" + prefix + "-*", "/_ilm/policy/" + prefix + "-alerts"} {
				_ = s.c.do(ctx, "DELETE", p, nil, nil, nil)
			}
		})
		return s
	})
}
