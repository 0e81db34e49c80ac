package escluster

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// Status writes what the state directory holds: each node's URL and
// process, and the cluster's health. It reports whether the cluster is
// green with all its nodes.
func Status(ctx context.Context, cfg Config, w io.Writer) (bool, error) {
	s, err := readState(cfg.StateDir)
	if err != nil {
		fmt.Fprintf(w, "no cluster in %s (%v)\n", cfg.StateDir, err)
		return false, nil
	}
	fmt.Fprintf(w, "cluster: Elasticsearch %s, %d nodes, state in %s\n", s.Version, s.Nodes, cfg.StateDir)
	switch {
	case !compatible(s, cfg):
		fmt.Fprintf(w, "note: not this configuration's Elasticsearch (%s, %s); the next up replaces it\n", Version, cfg.distDir())
	case s.HTTPPort != cfg.HTTPPort || s.TransportPort != cfg.TransportPort || s.Heap != cfg.Heap:
		fmt.Fprintf(w, "note: ports %d/%d and heap %s, not the configured %d/%d and %s; up keeps them, down first to change\n",
			s.HTTPPort, s.TransportPort, s.Heap, cfg.HTTPPort, cfg.TransportPort, cfg.Heap)
	}
	for i := 0; i < s.Nodes; i++ {
		pid, ok := nodePID(cfg, i)
		what := "stopped"
		if ok {
			what = fmt.Sprintf("running, pid %d", pid)
		}
		u := ""
		if i < len(s.URLs) {
			u = s.URLs[i]
		}
		fmt.Fprintf(w, "%s  %s  %s\n", nodeName(i), u, what)
	}
	c := &Cluster{urls: s.URLs, nodes: s.Nodes, client: &http.Client{}, down: map[int]bool{}}
	h, err := c.Health(ctx)
	if err != nil {
		fmt.Fprintf(w, "health: %v\n", err)
		return false, nil
	}
	fmt.Fprintf(w, "health: %s\nurls: %s\n", h, strings.Join(s.URLs, ","))
	return h.Status == "green" && h.Nodes == s.Nodes, nil
}
