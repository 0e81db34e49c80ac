package agent

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"

	tu "github.com/execid/correlator/internal/testutil"
	"github.com/execid/correlator/pkg/capture"
	"github.com/execid/correlator/pkg/store"
	"github.com/execid/correlator/pkg/vocab"
)

type nopSink struct{}

func (nopSink) Add(context.Context, store.Batch) error { return nil }

// TestJoinLossExported: processes the joiner sheds to stay within
// MaxPending show in correlator_join_evicted_total, read from the run
// loop's snapshot while the agent runs.
func TestJoinLossExported(t *testing.T) {
	cfg := Default()
	cfg.ExpireEvery = 10 * time.Millisecond
	cfg.Join.MaxPending = 2
	reg := prometheus.NewPedanticRegistry()
	a, err := New(cfg, staticMeta{}, nopSink{}, zerolog.Nop(), reg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { defer close(ran); a.Run(ctx) }()
	defer func() { cancel(); <-ran }()
	for i := range 5 {
		ev := capture.Event{Exec: capture.Exec{ProcessID: fmt.Sprintf("%d-1", 300+i),
			PID: uint32(300 + i), PPID: 1, ContainerID: ctr}, Kind: capture.KindExec, Time: time.Now(),
			AuditID: fmt.Sprintf("0d8e6c1e-5b5c-4c55-9d7c-6a1f1f6e2f%02d", i),
			Source:  vocab.SourceEnv}
		if err := a.Process(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
	want := `
# HELP correlator_join_evicted_total Entries the join dropped to stay within its bounds, by kind: processes, pending (expired early), records, denied (records of refused requests), exits (of unknown processes), merger (requests whose stages were being merged), pod_labels (pods whose labels the alert rules no longer see), roots (verified session roots whose hold on their request was forgotten), roots_over_cap (verified roots past 64 under one audit ID, never attributed).
# TYPE correlator_join_evicted_total counter
correlator_join_evicted_total{kind="denied"} 0
correlator_join_evicted_total{kind="exits"} 0
correlator_join_evicted_total{kind="merger"} 0
correlator_join_evicted_total{kind="pending"} 3
correlator_join_evicted_total{kind="pod_labels"} 0
correlator_join_evicted_total{kind="roots"} 0
correlator_join_evicted_total{kind="roots_over_cap"} 0
correlator_join_evicted_total{kind="processes"} 0
correlator_join_evicted_total{kind="records"} 0
`
	tu.EventuallyNil(t, func() error {
		return testutil.GatherAndCompare(reg, strings.NewReader(want), "correlator_join_evicted_total")
	})
}
