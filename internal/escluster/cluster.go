package escluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Cluster is a running Elasticsearch cluster: the shared one this package
// starts, or one given by URL (Connect).
type Cluster struct {
	cfg      Config
	urls     []string
	nodes    int
	external bool
	apiKey   string
	client   *http.Client

	mu   sync.Mutex
	down map[int]bool // nodes killed through this Cluster, not started since
}

func newLocal(cfg Config) *Cluster {
	return &Cluster{cfg: cfg, urls: cfg.urls(), nodes: cfg.Nodes, client: &http.Client{}, down: map[int]bool{}}
}

// Connect uses an existing cluster at urls, sending apiKey (if any) as an
// ApiKey authorization; it asks for the cluster's health once, for Nodes.
// Such a cluster cannot have nodes killed or started.
func Connect(ctx context.Context, urls []string, apiKey string) (*Cluster, error) {
	c := &Cluster{urls: urls, external: true, apiKey: apiKey, client: &http.Client{}, down: map[int]bool{}}
	h, err := c.Health(ctx)
	if err != nil {
		return nil, fmt.Errorf("connecting to %s: %w", strings.Join(urls, ","), err)
	}
	c.nodes = h.Nodes
	return c, nil
}

// URLs are the nodes' HTTP endpoints, node i's at index i.
func (c *Cluster) URLs() []string { return slices.Clone(c.urls) }

// URL is the first endpoint whose node was not killed through this Cluster.
func (c *Cluster) URL() string { return c.liveFirst()[0] }

// Nodes is the number of nodes the cluster has when whole.
func (c *Cluster) Nodes() int { return c.nodes }

// liveFirst is URLs with the nodes killed through this Cluster moved last.
func (c *Cluster) liveFirst() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var live, dead []string
	for i, u := range c.urls {
		if c.down[i] {
			dead = append(dead, u)
		} else {
			live = append(live, u)
		}
	}
	return append(live, dead...)
}

// KillNode kills node i's JVM with SIGKILL, as a crash would, and waits for
// it to be gone. Its data stays for StartNode.
func (c *Cluster) KillNode(i int) error {
	if err := c.checkNode(i); err != nil {
		return fmt.Errorf("killing node %d: %w", i, err)
	}
	gone, err := signalNode(c.cfg, i, unix.SIGKILL, 30*time.Second)
	if err != nil {
		return err
	}
	if !gone {
		return fmt.Errorf("killing node %s: still running 30 s after SIGKILL", nodeName(i))
	}
	c.setDown(i, true)
	return nil
}

// StartNode starts node i again (a no-op if it runs) on its old data
// directory; it returns once the node has started, not once it has joined
// the cluster: WaitHealth for that.
func (c *Cluster) StartNode(i int) error {
	if err := c.checkNode(i); err != nil {
		return fmt.Errorf("starting node %d: %w", i, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.StartTimeout)
	defer cancel()
	unlock, err := lockFile(ctx, c.cfg.lockPath())
	if err != nil {
		return err
	}
	defer unlock()
	if _, ok := nodePID(c.cfg, i); !ok {
		if err := startNodes(ctx, c.cfg, []int{i}, io.Discard); err != nil {
			return err
		}
	}
	c.setDown(i, false)
	return nil
}

func (c *Cluster) checkNode(i int) error {
	if c.external {
		return ErrExternal
	}
	if i < 0 || i >= c.cfg.Nodes {
		return fmt.Errorf("no node %d: the cluster has %d", i, c.cfg.Nodes)
	}
	return nil
}

func (c *Cluster) setDown(i int, down bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.down[i] = down
}

// Up brings the shared cluster up, or finds it up: under the lock, a state
// directory holding a cluster of this Version, node count and distribution,
// green with all its nodes, is reused as it is, on the ports and heap it was
// started with (so that two callers configured differently share it rather
// than replace each other's); nodes found not running are started on their
// data; another or a broken cluster is stopped and replaced. Progress goes to
// log. cfg.StartTimeout bounds it all.
func Up(ctx context.Context, cfg Config, log io.Writer) (*Cluster, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.StartTimeout)
	defer cancel()
	unlock, err := lockFile(ctx, cfg.lockPath())
	if err != nil {
		return nil, err
	}
	defer unlock()
	s, serr := readState(cfg.StateDir)
	switch {
	case serr == nil && compatible(s, cfg):
		if s.HTTPPort != cfg.HTTPPort || s.TransportPort != cfg.TransportPort || s.Heap != cfg.Heap {
			fmt.Fprintf(log, "escluster: keeping the cluster in %s as it was started (ports %d/%d, heap %s); "+
				"escluster down first to change them\n", cfg.StateDir, s.HTTPPort, s.TransportPort, s.Heap)
			cfg.HTTPPort, cfg.TransportPort, cfg.Heap = s.HTTPPort, s.TransportPort, s.Heap
		}
		c := newLocal(cfg)
		if c.allRunning() && c.reusable(ctx, log) {
			return c, nil
		}
	case errors.Is(serr, os.ErrNotExist) && !exists(cfg.StateDir):
	default:
		fmt.Fprintf(log, "escluster: %s holds another Elasticsearch or a broken cluster; replacing it\n", cfg.StateDir)
		if err := down(cfg, log); err != nil {
			return nil, err
		}
	}
	c := newLocal(cfg)
	start := time.Now()
	var stopped []int
	for i := 0; i < cfg.Nodes; i++ {
		if _, ok := nodePID(cfg, i); !ok {
			stopped = append(stopped, i)
		}
	}
	if err := startNodes(ctx, cfg, stopped, log); err != nil {
		return nil, err
	}
	if err := c.WaitHealth(ctx, "green", cfg.Nodes); err != nil {
		var logs strings.Builder
		for i := 0; i < cfg.Nodes; i++ {
			logs.WriteString(nodeLogs(cfg, i, 15))
		}
		return nil, fmt.Errorf("starting the cluster in %s: %w\n%s", cfg.StateDir, err, logs.String())
	}
	fmt.Fprintf(log, "escluster: cluster green with %d nodes after %s: %s\n",
		cfg.Nodes, time.Since(start).Round(time.Second), strings.Join(c.urls, ","))
	return c, nil
}

// reusable reports whether the running cluster can be handed out as it is:
// green with all its nodes within 30 s (an index just created turns green in
// seconds), or yellow with all of them, which a test's index asking for more
// replicas than there are nodes leaves behind: waiting would not help, and
// tests that need green wait for it themselves.
func (c *Cluster) reusable(ctx context.Context, log io.Writer) bool {
	urls := strings.Join(c.urls, ",")
	wait, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := c.WaitHealth(wait, "green", c.nodes); err == nil {
		fmt.Fprintf(log, "escluster: reusing the green cluster at %s\n", urls)
		return true
	}
	h, err := c.Health(ctx)
	if err != nil || h.Status != "yellow" || h.Nodes != c.nodes {
		return false
	}
	fmt.Fprintf(log, "escluster: reusing the cluster at %s, yellow for 30 s: %s\n", urls, h)
	return true
}

func (c *Cluster) allRunning() bool {
	for i := 0; i < c.cfg.Nodes; i++ {
		if _, ok := nodePID(c.cfg, i); !ok {
			return false
		}
	}
	return true
}

// startNodes fetches the distribution if needed, prepares the nodes and
// starts them together (each start waits for its node, and a node of a new
// cluster waits for the others to elect a master).
func startNodes(ctx context.Context, cfg Config, nodes []int, log io.Writer) error {
	if len(nodes) == 0 {
		return nil
	}
	t, err := findTools(cfg, !distributionPresent(cfg))
	if err != nil {
		return err
	}
	if err := ensureDistribution(ctx, cfg, t, log); err != nil {
		return err
	}
	r, err := jvmUser(cfg)
	if err != nil {
		return err
	}
	if err := mkdirReadable(cfg.StateDir); err != nil {
		return fmt.Errorf("creating state dir %s: %w", cfg.StateDir, err)
	}
	b, _ := json.MarshalIndent(wantState(cfg), "", "  ")
	if err := os.WriteFile(filepath.Join(cfg.StateDir, stateFile), append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("writing the state file: %w", err)
	}
	for _, p := range []string{cfg.distDir(), cfg.StateDir} {
		if err := r.checkSearchable(p); err != nil {
			return err
		}
	}
	for _, i := range nodes {
		if err := prepareNode(cfg, i, r); err != nil {
			return err
		}
	}
	fmt.Fprintf(log, "escluster: starting Elasticsearch %s nodes %v of %d in %s\n", Version, nodes, cfg.Nodes, cfg.StateDir)
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for k, i := range nodes {
		wg.Go(func() { errs[k] = startNode(ctx, cfg, i, t, r) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Down kills every node of the shared cluster and removes its state
// directory.
func Down(cfg Config, log io.Writer) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	unlock, err := lockFile(ctx, cfg.lockPath())
	if err != nil {
		return err
	}
	defer unlock()
	return down(cfg, log)
}

// down is Down under the lock.
func down(cfg Config, log io.Writer) error {
	if !exists(cfg.StateDir) {
		return nil
	}
	ok, err := ours(cfg.StateDir)
	if err != nil {
		return fmt.Errorf("reading state dir %s: %w", cfg.StateDir, err)
	}
	if !ok {
		return fmt.Errorf("removing state dir %s: it holds files escluster did not write; remove it yourself or set %s", cfg.StateDir, EnvState)
	}
	n := cfg.Nodes
	if s, err := readState(cfg.StateDir); err == nil && s.Nodes > n {
		n = s.Nodes
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Go(func() { errs[i] = stopNode(cfg, i) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if err := os.RemoveAll(cfg.StateDir); err != nil {
		return fmt.Errorf("removing state dir %s: %w", cfg.StateDir, err)
	}
	fmt.Fprintf(log, "escluster: stopped the cluster and removed %s\n", cfg.StateDir)
	return nil
}
