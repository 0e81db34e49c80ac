package node

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/execid/correlator/pkg/store"
	"github.com/execid/correlator/pkg/store/elasticsearch"
	"github.com/execid/correlator/pkg/store/sqlite"
)

// backend is a store the agent writes and the API reads.
type backend interface {
	store.Backend
	RunRetention(ctx context.Context, maxAge, interval time.Duration) error
}

// openBackend opens --store: sqlite:PATH or elasticsearch.
func openBackend(ctx context.Context, storeURL string, es *elasticsearch.Connection, log zerolog.Logger, reg prometheus.Registerer) (backend, error) {
	if p, ok := strings.CutPrefix(storeURL, "sqlite:"); ok {
		return sqlite.Open(p, sqlite.Config{}, log)
	}
	cfg, err := es.Resolve()
	if err != nil {
		return nil, err
	}
	return elasticsearch.Open(ctx, cfg, log, reg)
}

// validateStore checks --store's form.
func validateStore(storeURL string, es *elasticsearch.Connection) error {
	switch {
	case strings.HasPrefix(storeURL, "sqlite:") && len(storeURL) > len("sqlite:"):
		return nil
	case storeURL == "elasticsearch":
		if !es.Configured() {
			return errors.New("validating --store elasticsearch: give --es-url")
		}
		return nil
	}
	return fmt.Errorf("validating --store %q: want sqlite:PATH or elasticsearch", storeURL)
}
