package elasticsearch

import (
	"context"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/execid/correlator/internal/esdouble"
)

// openDouble opens a store on the protocol double, kept for what the real
// cluster cannot be made to do on demand: refuse bulk items (429, 400) or
// whole requests, stop answering mid-test, and have ILM.
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
