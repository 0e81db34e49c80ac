package delivery

import (
	"context"
	"sync"
	"testing"

	"github.com/rs/zerolog"

	"github.com/execid/correlator/internal/recordtest"
	"github.com/execid/correlator/pkg/alert"
	"github.com/execid/correlator/pkg/store"
)

var (
	t0      = recordtest.T0
	session = recordtest.Session
	process = recordtest.Process
)

// claimantInput is process() carrying session()'s ID without being
// attributed to it, with session() as the claimed session.
func claimantInput() alert.Input {
	return alert.Input{Claimed: recordtest.Session(), Process: recordtest.Claimant()}
}

// newTestEngine runs the shipped rules, for real alert payloads.
func newTestEngine(t testing.TB) *alert.Engine {
	t.Helper()
	e, err := alert.NewEngine(alert.DefaultRules(), zerolog.Nop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// countingSink counts alerts its sink accepted.
type countingSink struct {
	Deliverer
	mu sync.Mutex
	n  *int
}

func (c *countingSink) Deliver(ctx context.Context, alerts []store.Alert) error {
	err := c.Deliverer.Deliver(ctx, alerts)
	if err == nil {
		c.mu.Lock()
		*c.n += len(alerts)
		c.mu.Unlock()
	}
	return err
}

func (c *countingSink) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return *c.n
}
