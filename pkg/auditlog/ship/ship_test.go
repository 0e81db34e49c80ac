package ship

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/execid/correlator/internal/escluster"
	"github.com/execid/correlator/internal/testutil"
	"github.com/execid/correlator/pkg/auditlog"
	"github.com/execid/correlator/pkg/store/elasticsearch"
)

// TestAuditShip: the control-plane role tails a real audit log into
// Elasticsearch (the real cluster, under an index prefix of its own), and
// a node's lookup finds the record there.
func TestAuditShip(t *testing.T) {
	es := escluster.Shared(t)
	dir := t.TempDir()
	logPath := filepath.Join(dir, "audit.log")
	req := testutil.ExecRequest{AuditID: testutil.RandomUUID(), User: "alice", Namespace: "shop", Pod: "web-0",
		Container: "app", Command: []string{"cat", "/etc/passwd"}, Received: time.Now(), Duration: time.Second}
	noise := `{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"n1","stage":"ResponseComplete","requestURI":"/api/v1/pods","verb":"list","user":{"username":"kubelet"},"requestReceivedTimestamp":"2026-01-01T00:00:00Z","stageTimestamp":"2026-01-01T00:00:00Z"}` + "\n"
	if err := os.WriteFile(logPath, append([]byte(noise), req.LogLines()...), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := elasticsearch.DefaultConfig()
	cfg.URLs, cfg.APIKey, cfg.IndexPrefix, cfg.Refresh = es.URLs(), os.Getenv(escluster.EnvAPIKey), escluster.Prefix(t, es), "wait_for"
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := elasticsearch.Open(ctx, cfg, zerolog.Nop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	m, err := auditlog.NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	o := auditlog.SourcesConfig{LogPaths: []string{logPath}}
	srcs, err := o.Sources(nil, zerolog.Nop(), m)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- Ship(ctx, srcs, st.WriteAuditRecords, zerolog.Nop()) }()

	l, err := elasticsearch.NewLookup(cfg, elasticsearch.LookupConfig{Pattern: "-", NegativeTTL: time.Millisecond}, zerolog.Nop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var recs []auditlog.ExecRecord
	testutil.EventuallyNil(t, func() error {
		// A new index's shards may still be starting: all shards fail
		// (503) until they are, so an error is waited out, not fatal.
		if recs, err = l.LookupExec(ctx, req.AuditID); err != nil {
			return err
		}
		if len(recs) == 0 || !recs[0].Complete() {
			return fmt.Errorf("lookup found %+v", recs)
		}
		return nil
	})
	if r := recs[0]; r.User.Username != "alice" || r.Pod != "web-0" || !slices.Equal(r.Command, req.Command) {
		t.Errorf("shipped record %+v", r)
	}
	// The lookup may see a write before it returns (on a refreshed
	// primary, its replica not yet refreshed): poll the count as well.
	testutil.EventuallyNil(t, func() error {
		n, err := es.Count(ctx, cfg.IndexPrefix+"-audit*")
		switch {
		case err != nil:
			return err
		case n > 3:
			t.Fatalf("audit indices hold %d stages, want the 3 of the exec and not the list", n)
		case n < 3:
			return fmt.Errorf("audit indices hold %d of the exec's 3 stages", n)
		}
		return nil
	})
	cancel()
	if err := <-done; err != nil {
		t.Errorf("ship: %v", err)
	}
}
