package node

import (
	"context"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/execid/correlator/pkg/agent"
	"github.com/execid/correlator/pkg/capture"
)

// freeAddr is a loopback address nothing listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func testConfig(t *testing.T) Config {
	return Config{Listen: freeAddr(t), Store: "sqlite:" + filepath.Join(t.TempDir(), "c.db"), InsecureNoAuth: true,
		NoCapture: true, Retention: 24 * time.Hour, Agent: agent.Default(), Capture: capture.AgentDefault()}
}

// TestNewBadStore: a store that cannot open fails New with an error that
// names it, where it once panicked (the deferred cleanup read a node that
// `return nil, err` had set to nil).
func TestNewBadStore(t *testing.T) {
	cfg := testConfig(t)
	cfg.Store = "sqlite:" + filepath.Join(t.TempDir(), "missing", "dir", "c.db")
	n, err := New(context.Background(), cfg, zerolog.Nop())
	if err == nil || n != nil {
		t.Fatalf("New with %s: %v %v, want an error and no node", cfg.Store, n, err)
	}
	if !strings.Contains(err.Error(), "opening the store "+cfg.Store) {
		t.Errorf("error %q does not name the store %s", err, cfg.Store)
	}
}

// TestNewReleasesOnFailure: a start that fails at its last step (the
// probes: a pin path off bpffs, or no privilege) has released the ports it
// bound before: the API's and pprof's are free again.
func TestNewReleasesOnFailure(t *testing.T) {
	cfg := testConfig(t)
	cfg.NoCapture = false
	cfg.Capture.PinPath = filepath.Join(t.TempDir(), "pins")
	cfg.PprofListen = freeAddr(t)
	n, err := New(context.Background(), cfg, zerolog.Nop())
	if err == nil || n != nil {
		t.Fatalf("New with the pin path %s: %v %v, want an error and no node", cfg.Capture.PinPath, n, err)
	}
	if !strings.Contains(err.Error(), "loading the probes") {
		t.Errorf("error %q, want the probes' load named", err)
	}
	for _, addr := range []string{cfg.Listen, cfg.PprofListen} {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Errorf("after the failed start, %s is still bound: %v", addr, err)
			continue
		}
		l.Close()
	}
}

// TestStoreNameRedacts: a start-up error names the Elasticsearch store by
// its URLs, which go to the log; a password in one must not.
func TestStoreNameRedacts(t *testing.T) {
	cfg := &Config{Store: "elasticsearch"}
	cfg.ES.URLs = []string{"https://elastic:s3cret@es-0:9200", "http://es-1:9200", "://bad"}
	got := storeName(cfg)
	if strings.Contains(got, "s3cret") || !strings.Contains(got, "elastic:xxxxx@es-0:9200") || !strings.Contains(got, "http://es-1:9200") {
		t.Errorf("storeName = %q", got)
	}
	if got := storeName(&Config{Store: "sqlite:/var/lib/c.db"}); got != "sqlite:/var/lib/c.db" {
		t.Errorf("storeName = %q", got)
	}
}
