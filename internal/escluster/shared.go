package escluster

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/execid/correlator/internal/testutil"
)

// Shared returns the cluster for a test. With CORRELATOR_TEST_ES_URL set
// (comma-separated URLs, CORRELATOR_TEST_ES_API_KEY optional) it is that
// cluster and nothing is started; unreachable, the test fails. Otherwise it
// is the shared local cluster, started by the first caller on the machine
// and reused by later ones (`make test` starts it before go test). When it
// cannot run (no mvn or Java 17, a port taken, a node that does not start)
// the test skips with the reason, except under CI=true, where it fails.
//
// Tests that kill nodes must start them again and wait for green before
// they end: the next test gets the same cluster.
func Shared(t testing.TB) *Cluster {
	t.Helper()
	if v := strings.TrimSpace(os.Getenv(EnvURL)); v != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := Connect(ctx, splitURLs(v), os.Getenv(EnvAPIKey))
		if err != nil {
			t.Fatalf("using the cluster of %s: %v", EnvURL, err)
		}
		return c
	}
	cfg, err := ConfigFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	c, err := Up(context.Background(), cfg, testLog{t})
	if err != nil {
		reason := "no local Elasticsearch cluster: " + err.Error()
		if testutil.InCI() {
			t.Fatalf("%s (under CI=true a skip is a failure)", reason)
		}
		t.Skip(reason)
	}
	return c
}

func splitURLs(v string) []string {
	var out []string
	for _, u := range strings.Split(v, ",") {
		if u = strings.TrimRight(strings.TrimSpace(u), "/"); u != "" {
			out = append(out, u)
		}
	}
	return out
}

// testLog writes Up's progress lines to the test's log.
type testLog struct{ t testing.TB }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Logf("%s", strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
