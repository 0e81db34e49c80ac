package alert

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/execid/correlator/internal/recordtest"
	"github.com/execid/correlator/pkg/store"
)

var (
	t0      = recordtest.T0
	session = recordtest.Session
	process = recordtest.Process
)

// claimantInput is process() carrying session()'s ID without being
// attributed to it, with session() as the claimed session.
func claimantInput() Input {
	return Input{Claimed: recordtest.Session(), Process: recordtest.Claimant()}
}

func newTestEngine(t testing.TB, rules []Rule, reg prometheus.Registerer, opts ...EngineOption) *Engine {
	t.Helper()
	e, err := NewEngine(rules, zerolog.Nop(), reg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func ruleNames(alerts []store.Alert) []string {
	var n []string
	for _, a := range alerts {
		n = append(n, a.Rule)
	}
	return n
}
