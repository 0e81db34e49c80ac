package escluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// clusterName is cluster.name; the node's log is logs/<clusterName>.log.
const clusterName = "correlator-test"

// serverMain is on the command line of every Elasticsearch server JVM.
const serverMain = "org.elasticsearch.bootstrap.Elasticsearch"

// runAs is the user the JVMs run as; nil means this process's own user.
type runAs struct {
	name     string
	uid, gid uint32
}

// jvmUser returns nil when not root; as root, the configured system user,
// created with useradd when missing (Elasticsearch refuses to run as root).
func jvmUser(cfg Config) (*runAs, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup(cfg.User)
	if err != nil {
		var unknown user.UnknownUserError
		if !errors.As(err, &unknown) {
			return nil, fmt.Errorf("looking up user %s: %w", cfg.User, err)
		}
		useradd, lerr := exec.LookPath("useradd")
		if lerr != nil {
			useradd = "/usr/sbin/useradd"
		}
		out, err := exec.Command(useradd, "-r", "-M", "-s", "/usr/sbin/nologin", cfg.User).CombinedOutput()
		if err != nil {
			return nil, fmt.Errorf("creating system user %s with useradd: %w: %s", cfg.User, err, bytes.TrimSpace(out))
		}
		if u, err = user.Lookup(cfg.User); err != nil {
			return nil, fmt.Errorf("looking up user %s after useradd: %w", cfg.User, err)
		}
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("parsing uid of %s: %w", cfg.User, err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("parsing gid of %s: %w", cfg.User, err)
	}
	return &runAs{name: cfg.User, uid: uint32(uid), gid: uint32(gid)}, nil
}

// chownTree gives dir and everything under it to the user.
func (r *runAs) chownTree(dir string) error {
	if r == nil {
		return nil
	}
	return filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, int(r.uid), int(r.gid))
	})
}

// checkSearchable reports an ancestor of path that the JVM user cannot
// enter (a cache under /root, say): the nodes would fail to read it.
func (r *runAs) checkSearchable(path string) error {
	if r == nil {
		return nil
	}
	for d := filepath.Clean(path); ; d = filepath.Dir(d) {
		st, err := os.Stat(d)
		if err != nil {
			return fmt.Errorf("checking %s: %w", d, err)
		}
		if st.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("checking %s: user %s cannot enter %s (mode %v); set %s or %s elsewhere",
				path, r.name, d, st.Mode().Perm(), EnvCache, EnvState)
		}
		if d == filepath.Dir(d) {
			return nil
		}
	}
}

// prepareNode creates node i's directories and writes its configuration:
// the distribution's config/ (once) and an elasticsearch.yml.
func prepareNode(cfg Config, i int, r *runAs) error {
	dir := cfg.nodeDir(i)
	for _, sub := range []string{"data", "logs", "tmp"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			return fmt.Errorf("creating node %s's directories: %w", nodeName(i), err)
		}
	}
	conf := filepath.Join(dir, "config")
	if _, err := os.Stat(conf); errors.Is(err, fs.ErrNotExist) {
		if err := copyDir(filepath.Join(cfg.distDir(), "config"), conf); err != nil {
			return fmt.Errorf("copying the distribution's config for node %s: %w", nodeName(i), err)
		}
	}
	data, err := os.ReadDir(filepath.Join(dir, "data"))
	if err != nil {
		return fmt.Errorf("reading node %s's data directory: %w", nodeName(i), err)
	}
	if err := os.WriteFile(filepath.Join(conf, "elasticsearch.yml"), nodeYAML(cfg, i, len(data) == 0), 0o644); err != nil {
		return fmt.Errorf("writing node %s's elasticsearch.yml: %w", nodeName(i), err)
	}
	if err := r.chownTree(dir); err != nil {
		return fmt.Errorf("giving node %s's directory to %s: %w", nodeName(i), r.name, err)
	}
	return nil
}

// nodeYAML is node i's elasticsearch.yml; bootstrap (an empty data
// directory) names the initial master nodes.
func nodeYAML(cfg Config, i int, bootstrap bool) []byte {
	dir := cfg.nodeDir(i)
	var seeds, masters []string
	for j := 0; j < cfg.Nodes; j++ {
		seeds = append(seeds, strconv.Quote("127.0.0.1:"+strconv.Itoa(cfg.TransportPort+j)))
		masters = append(masters, nodeName(j))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# Written by internal/escluster; rewritten at every start.\n")
	fmt.Fprintf(&b, "cluster.name: %s\nnode.name: %s\n", clusterName, nodeName(i))
	fmt.Fprintf(&b, "network.host: 127.0.0.1\nhttp.port: %d\ntransport.port: %d\n", cfg.HTTPPort+i, cfg.TransportPort+i)
	fmt.Fprintf(&b, "path.data: %s\npath.logs: %s\n", strconv.Quote(filepath.Join(dir, "data")), strconv.Quote(filepath.Join(dir, "logs")))
	if cfg.Nodes == 1 {
		b.WriteString("discovery.type: single-node\n")
	} else {
		fmt.Fprintf(&b, "discovery.seed_hosts: [%s]\n", strings.Join(seeds, ", "))
		if bootstrap { // a node that has joined a cluster must not carry it
			fmt.Fprintf(&b, "cluster.initial_master_nodes: [%s]\n", strings.Join(masters, ", "))
		}
	}
	b.WriteString("cluster.routing.allocation.disk.threshold_enabled: false\n")
	b.WriteString("xpack.security.enabled: false\n")
	return []byte(b.String())
}

// startNode starts node i's JVM with the distribution's bin/elasticsearch
// -d, which returns once the node has started (or failed to). The JVM runs
// in a session of its own, so an interrupted `go test` leaves it running.
func startNode(ctx context.Context, cfg Config, i int, t tools, r *runAs) error {
	dir := cfg.nodeDir(i)
	for _, port := range []int{cfg.HTTPPort + i, cfg.TransportPort + i} {
		if err := portFree(port); err != nil {
			return fmt.Errorf("starting node %s: %w", nodeName(i), err)
		}
	}
	logPath := filepath.Join(dir, "startup.log")
	out, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("opening %s: %w", logPath, err)
	}
	defer out.Close()
	fmt.Fprintf(out, "---- %s starting node %s\n", time.Now().Format(time.RFC3339), nodeName(i))
	cmd := exec.CommandContext(ctx, filepath.Join(cfg.distDir(), "bin", "elasticsearch"), "-d", "-p", filepath.Join(dir, "pid"))
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + dir,
		"ES_JAVA_HOME=" + t.javaHome,
		"ES_PATH_CONF=" + filepath.Join(dir, "config"),
		"ES_TMPDIR=" + filepath.Join(dir, "tmp"),
		"ES_JAVA_OPTS=-Xms" + cfg.Heap + " -Xmx" + cfg.Heap,
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if r != nil {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: r.uid, Gid: r.gid}
	}
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("starting node %s (bin/elasticsearch -d): %w\n%s", nodeName(i), err, nodeLogs(cfg, i, 30))
	}
	if _, ok := nodePID(cfg, i); !ok {
		return fmt.Errorf("starting node %s: bin/elasticsearch -d returned but no server runs\n%s", nodeName(i), nodeLogs(cfg, i, 30))
	}
	return nil
}

// portFree reports a port on 127.0.0.1 that something already holds.
func portFree(port int) error {
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		hint := ""
		if lo, hi, ok := ephemeralRange(); ok && port >= lo && port <= hi {
			hint = fmt.Sprintf("; it is in the kernel's ephemeral range %d-%d, where outgoing connections take ports", lo, hi)
		}
		return fmt.Errorf("checking port %d: in use (set %s/%s to move the cluster%s): %w",
			port, EnvHTTPPort, EnvTransportPort, hint, err)
	}
	return l.Close()
}

// ephemeralRange is the kernel's range of source ports for connections.
func ephemeralRange() (lo, hi int, ok bool) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, 0, false
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0, 0, false
	}
	lo, err1 := strconv.Atoi(f[0])
	hi, err2 := strconv.Atoi(f[1])
	return lo, hi, err1 == nil && err2 == nil
}

// nodePID returns node i's server pid and whether that process runs: its
// pid file names a live (not zombie) Elasticsearch server whose temporary
// directory is this node's, so a reused pid is not mistaken for it.
func nodePID(cfg Config, i int) (int, bool) {
	b, err := os.ReadFile(filepath.Join(cfg.nodeDir(i), "pid"))
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0, false
	}
	cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil { // gone; a zombie's cmdline is empty
		return pid, false
	}
	tmpFlag := "-Djava.io.tmpdir=" + filepath.Join(cfg.nodeDir(i), "tmp")
	args := strings.Split(string(cmdline), "\x00")
	hasMain, hasTmp := false, false
	for _, a := range args {
		hasMain = hasMain || strings.HasSuffix(a, serverMain)
		hasTmp = hasTmp || a == tmpFlag
	}
	return pid, hasMain && hasTmp
}

// signalNode sends sig to node i's server and waits, up to wait, for it to
// exit; it returns whether it did. A node that is not running has exited.
func signalNode(cfg Config, i int, sig syscall.Signal, wait time.Duration) (bool, error) {
	pid, ok := nodePID(cfg, i)
	if !ok {
		return true, nil
	}
	if err := syscall.Kill(pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return false, fmt.Errorf("sending %v to node %s (pid %d): %w", sig, nodeName(i), pid, err)
	}
	deadline := time.Now().Add(wait)
	for {
		if exited(pid) {
			return true, nil
		}
		if time.Now().After(deadline) {
			return false, nil
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// exited reports whether process pid has finished exiting: gone, or a
// zombie (the kernel has closed its files and sockets by then). Its
// cmdline empties earlier, while it still holds them.
func exited(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	i := strings.LastIndex(string(b), ") ") // the state follows "(comm) "
	if i < 0 {
		return false
	}
	state := string(b)[i+2:]
	return strings.HasPrefix(state, "Z") || strings.HasPrefix(state, "X")
}

// stopNode kills node i with SIGKILL: its data is about to be removed, so
// a graceful stop (which takes up to half a minute when the whole cluster
// goes at once) buys nothing.
func stopNode(cfg Config, i int) error {
	done, err := signalNode(cfg, i, syscall.SIGKILL, 30*time.Second)
	if err != nil {
		return err
	}
	if !done {
		return fmt.Errorf("stopping node %s: still running 30 s after SIGKILL", nodeName(i))
	}
	return nil
}

// nodeLogs is the tail of node i's startup output and server log.
func nodeLogs(cfg Config, i int, n int) string {
	dir := cfg.nodeDir(i)
	var b strings.Builder
	for _, p := range []string{filepath.Join(dir, "startup.log"), filepath.Join(dir, "logs", clusterName+".log")} {
		data, err := os.ReadFile(p)
		if err != nil {
			fmt.Fprintf(&b, "(%s: %v)\n", p, err)
			continue
		}
		fmt.Fprintf(&b, "---- last lines of %s:\n%s\n", p, tail(data, n))
	}
	return b.String()
}
