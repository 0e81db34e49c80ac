// Package escluster runs a real three-node Elasticsearch cluster on this
// machine for the tests that need one, and shares it between them.
//
// The distribution is Elastic's integ-test zip from Maven Central, fetched
// once with the machine's mvn into a cache outside the checkout and unzipped
// there. The cluster lives in a state directory (node directories, pid files,
// a state file with the URLs); an flock on a lock file beside it makes the
// first caller start it and later callers, in this process or another, find
// it healthy and reuse it. Nodes bind to 127.0.0.1 with 512m heaps, disk
// watermarks off and security off; as root the JVMs run as an unprivileged
// system user, since Elasticsearch refuses to run as root.
//
// Tests call Shared; the command in cmd/escluster brings the cluster up and
// down around `make test`. docs/testing-es.md says the rest.
package escluster

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// Version is the Elasticsearch the cluster runs: the integ-test zip of
// org.elasticsearch.distribution.integ-test-zip:elasticsearch on Maven
// Central, the same 8.19 line as the go-elasticsearch client in go.mod.
const Version = "8.19.8"

// Environment variables read by ConfigFromEnv and Shared.
const (
	// EnvURL names an existing cluster (comma-separated URLs): Shared uses
	// it and starts nothing.
	EnvURL = "CORRELATOR_TEST_ES_URL"
	// EnvAPIKey is the API key sent to the cluster of EnvURL, if any.
	EnvAPIKey = "CORRELATOR_TEST_ES_API_KEY"
	// EnvCache overrides where the distribution is cached.
	EnvCache = "CORRELATOR_ES_CACHE"
	// EnvState overrides the shared cluster's state directory.
	EnvState = "CORRELATOR_ES_STATE"
	// EnvHTTPPort and EnvTransportPort override the first node's ports;
	// node i uses port+i.
	EnvHTTPPort      = "CORRELATOR_ES_HTTP_PORT"
	EnvTransportPort = "CORRELATOR_ES_TRANSPORT_PORT"
)

// installHint is what a Debian machine lacking the tools runs.
const installHint = "apt-get install -y maven openjdk-17-jre-headless"

// ErrMissingTools reports that mvn or a Java 17 is not on this machine; the
// error wrapping it names which, and how to install them.
var ErrMissingTools = errors.New("missing tools to run Elasticsearch")

// ErrExternal reports an operation that needs a cluster this package
// started, asked of one given by CORRELATOR_TEST_ES_URL.
var ErrExternal = errors.New("cluster given by " + EnvURL + ", not started here")

// Config is where and how the shared cluster runs.
type Config struct {
	// CacheDir holds the unzipped distribution, elasticsearch-<Version>.
	CacheDir string
	// StateDir holds the nodes' directories and the state file; the lock
	// file is StateDir + ".lock".
	StateDir string
	// Nodes is the number of nodes, n0..n<Nodes-1>.
	Nodes int
	// HTTPPort and TransportPort are node 0's; node i adds i. Keep them
	// below the kernel's ephemeral range (32768-60999 by default): there,
	// any outgoing connection, the nodes' own included, can hold one as its
	// source port when a node (re)starts and binds it.
	HTTPPort, TransportPort int
	// Heap is each JVM's -Xms and -Xmx.
	Heap string
	// User is the system user the JVMs run as when this process is root;
	// it is created with useradd when missing.
	User string
	// JavaHome is a Java 17 home (ES_JAVA_HOME); empty: found on the machine.
	JavaHome string
	// StartTimeout bounds starting the cluster and waiting for it to turn
	// green; three nodes take about 35 s on 2 cores, more when cold.
	StartTimeout time.Duration
}

// DefaultConfig is the shared cluster's configuration without environment.
func DefaultConfig() Config {
	return Config{
		CacheDir:      defaultCacheDir(),
		StateDir:      filepath.Join(os.TempDir(), "correlator-es-cluster"),
		Nodes:         3,
		HTTPPort:      29200,
		TransportPort: 29300,
		Heap:          "512m",
		User:          "correlator-es",
		StartTimeout:  5 * time.Minute,
	}
}

// ConfigFromEnv is DefaultConfig with the CORRELATOR_ES_* variables and
// ES_JAVA_HOME applied, then validated.
func ConfigFromEnv() (Config, error) {
	cfg := DefaultConfig()
	if v := os.Getenv(EnvCache); v != "" {
		cfg.CacheDir = v
	}
	if v := os.Getenv(EnvState); v != "" {
		cfg.StateDir = v
	}
	if v := os.Getenv("ES_JAVA_HOME"); v != "" {
		cfg.JavaHome = v
	}
	for _, p := range []struct {
		env string
		dst *int
	}{{EnvHTTPPort, &cfg.HTTPPort}, {EnvTransportPort, &cfg.TransportPort}} {
		v := os.Getenv(p.env)
		if v == "" {
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil {
			return Config{}, fmt.Errorf("parsing %s=%q: %w", p.env, v, err)
		}
		*p.dst = n
	}
	return cfg, cfg.Validate()
}

// Validate reports a configuration that cannot run.
func (c Config) Validate() error {
	switch {
	case c.CacheDir == "" || !filepath.IsAbs(c.CacheDir):
		return fmt.Errorf("validating cache dir %q: must be an absolute path", c.CacheDir)
	case c.StateDir == "" || !filepath.IsAbs(c.StateDir):
		return fmt.Errorf("validating state dir %q: must be an absolute path", c.StateDir)
	case c.Nodes < 1:
		return fmt.Errorf("validating nodes %d: need at least one", c.Nodes)
	case c.HTTPPort < 1 || c.HTTPPort+c.Nodes > 65536:
		return fmt.Errorf("validating http port %d: out of range", c.HTTPPort)
	case c.TransportPort < 1 || c.TransportPort+c.Nodes > 65536:
		return fmt.Errorf("validating transport port %d: out of range", c.TransportPort)
	case c.HTTPPort < c.TransportPort+c.Nodes && c.TransportPort < c.HTTPPort+c.Nodes:
		return fmt.Errorf("validating ports: http %d.. and transport %d.. overlap", c.HTTPPort, c.TransportPort)
	case c.User == "":
		return errors.New("validating user: empty")
	case c.StartTimeout <= 0:
		return errors.New("validating start timeout: must be positive")
	}
	return nil
}

// defaultCacheDir is /var/cache/correlator/elasticsearch for root, else the
// user's cache directory ($XDG_CACHE_HOME or ~/.cache).
func defaultCacheDir() string {
	if os.Geteuid() == 0 {
		return "/var/cache/correlator/elasticsearch"
	}
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "correlator", "elasticsearch")
	}
	return filepath.Join(os.TempDir(), "correlator-cache", "elasticsearch")
}

// lockPath is the flock file that serialises starting and stopping.
func (c Config) lockPath() string { return filepath.Clean(c.StateDir) + ".lock" }

// nodeDir is node i's directory: config, data, logs, tmp, pid.
func (c Config) nodeDir(i int) string { return filepath.Join(c.StateDir, nodeName(i)) }

func nodeName(i int) string { return "n" + strconv.Itoa(i) }

// httpURL is node i's HTTP endpoint.
func (c Config) httpURL(i int) string {
	return "http://127.0.0.1:" + strconv.Itoa(c.HTTPPort+i)
}

func (c Config) urls() []string {
	out := make([]string, c.Nodes)
	for i := range out {
		out[i] = c.httpURL(i)
	}
	return out
}
