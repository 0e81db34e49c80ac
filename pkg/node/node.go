// Package node assembles correlator's node agent from its parts: the
// probes, the store and its writer, the joiner, the audit sources, the
// alert engine and sinks, and the API server with metrics and readiness.
// New builds every part that can fail before any goroutine starts, so a
// failed start returns having started nothing; Run runs them all.
package node

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"runtime/debug"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"

	"github.com/execid/correlator/pkg/agent"
	"github.com/execid/correlator/pkg/alert/delivery"
	"github.com/execid/correlator/pkg/api"
	"github.com/execid/correlator/pkg/auditlog"
	"github.com/execid/correlator/pkg/authn"
	"github.com/execid/correlator/pkg/capture"
	"github.com/execid/correlator/pkg/meta"
	"github.com/execid/correlator/pkg/store"
	"github.com/execid/correlator/pkg/store/elasticsearch"
)

// Node is the assembled agent, built and not yet running.
type Node struct {
	cfg   Config
	log   zerolog.Logger
	cl    cleanups
	st    backend
	disp  *delivery.Dispatcher
	res   *meta.Service
	ag    *agent.Agent
	srcs  []auditlog.Source
	probe *capture.Probe
	col   *capture.Collector
	rd    *readiness
	srv   *api.Server
	ln    net.Listener
}

// New builds the agent; on an error it has released whatever it built, and
// the error names what failed: the flag, the file, the address. What reads a
// file or binds a port comes before the probes load, so a start that fails
// leaves nothing in the kernel. Cleanups run in reverse order and their
// errors are returned, not dropped.
func New(ctx context.Context, cfg Config, log zerolog.Logger) (*Node, error) {
	// A local, not a named result: `return nil, err` must not take the node
	// from the cleanup that releases what it built.
	n := &Node{cfg: cfg, log: log}
	if err := n.build(ctx); err != nil {
		return nil, errors.Join(err, n.cl.run())
	}
	return n, nil
}

func (n *Node) build(ctx context.Context) error {
	cfg, log := &n.cfg, n.log
	if err := checkTLS(cfg.TLSCert, cfg.TLSKey); err != nil {
		return err
	}
	if cfg.PprofListen != "" {
		stopPprof, err := startPprof(cfg.PprofListen, log)
		if err != nil {
			return err
		}
		n.cl.add("stopping the pprof server", stopPprof)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	st, err := openBackend(ctx, cfg.Store, &cfg.ES, log, reg)
	if err != nil {
		return fmt.Errorf("opening the store %s: %w", storeName(cfg), err)
	}
	n.st = st
	n.cl.add("closing the store", n.st.Close)
	agentOpts, err := n.agentOptions(ctx, reg)
	if err != nil {
		return err
	}
	if n.disp != nil {
		n.cl.add("closing the alert spools", n.disp.Close)
	}
	writer := agent.NewStoreWriter(n.st)
	n.cl.add("flushing the store", writer.Close)
	reg.MustRegister(store.NewWriterCollector(writer))
	if n.res, err = meta.New(meta.Config{PodMapPath: cfg.PodMap, CRISocket: cfg.CRISocket, CacheSize: 4096}, log, reg); err != nil {
		return err
	}
	n.cl.add("closing the pod metadata client", n.res.Close)
	// The heuristic leaves a bridged request to its bridge root only when
	// the kernel captures the bridge's key.
	cfg.Agent.Join.BridgeCaptured = !cfg.NoCapture && slices.Contains(cfg.Capture.Keys, cfg.Capture.BridgeKey)
	// A record on its way comes within the audit lag the operator set
	// (--audit-lag): only then is it looked up.
	cfg.Agent.LookupDelay = cfg.Agent.Join.AuditLag
	if w := LateWindow(cfg.Agent.Join.LateWindow, cfg.Retention); w != cfg.Agent.Join.LateWindow {
		log.Info().Dur("late_window", cfg.Agent.Join.LateWindow).Dur("retention", cfg.Retention).
			Msg("--late-window is longer than --retention: exec sessions' processes are held for the retention only")
		cfg.Agent.Join.LateWindow = w
	}
	// The agent keeps its footprint under the limit SetMemoryLimit set, if any.
	if l := debug.SetMemoryLimit(-1); l != math.MaxInt64 {
		cfg.Agent.MemoryLimit = l
	}
	if n.ag, err = agent.New(cfg.Agent, n.res, writer, log, reg, agentOpts...); err != nil {
		return err
	}
	am, err := auditlog.NewMetrics(reg)
	if err != nil {
		return err
	}
	wh, auth, err := n.authAndSources(log, am)
	if err != nil {
		return err
	}
	n.rd = &readiness{store: writer}
	lat, err := api.NewLatency(reg)
	if err != nil {
		return err
	}
	handler := api.NewHandler(n.st, api.Config{Auth: auth, Webhook: wh,
		Metrics: promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}),
		Ready:   n.rd.check, Latency: lat}, log)
	n.srv = api.NewServer(handler, api.ServerConfig{Addr: cfg.Listen})
	if err := n.listen(); err != nil {
		return err
	}
	if !cfg.NoCapture {
		return n.loadProbes(reg)
	}
	return nil
}

// loadProbes loads and attaches the probes: the last step of a start, so
// nothing after it fails and leaves them running for nobody.
func (n *Node) loadProbes(reg prometheus.Registerer) error {
	p, err := capture.Load(n.cfg.Capture, n.log)
	if err != nil {
		return fmt.Errorf("loading the probes: %w", err)
	}
	n.probe = p
	// Once attached, this is Close and the pins stay for the next agent;
	// before, it also removes the pins this start made.
	n.cl.add("releasing the probes", p.Discard)
	n.col = capture.NewCollector(p)
	reg.MustRegister(n.col)
	if err := p.Attach(); err != nil {
		return fmt.Errorf("attaching the probes: %w", err)
	}
	capture.LogKernelState(n.log, n.cfg.Capture)
	return nil
}

// authAndSources builds the API's authentication, the webhook on the API
// listener and the audit sources. One reloading source per token file is
// shared by the API, the webhook on the API listener and
// --audit-webhook-listen.
func (n *Node) authAndSources(log zerolog.Logger, am *auditlog.Metrics) (wh http.Handler, auth api.Authenticator, err error) {
	cfg := &n.cfg
	tokens := authn.NewFiles(log)
	var apiTokens *authn.File
	if !cfg.InsecureNoAuth {
		if cfg.TokenFile != "" {
			if apiTokens, err = tokens.Open(cfg.TokenFile); err != nil {
				return nil, nil, fmt.Errorf("opening --token-file: %w", err)
			}
		}
		if auth, err = cfg.authenticator(apiTokens, log); err != nil {
			return nil, nil, err
		}
	}
	if cfg.Audit.Configured() {
		if n.srcs, err = cfg.Audit.Sources(tokens, log, am); err != nil {
			return nil, nil, err
		}
	}
	// The webhook on the API listener takes the token file's first token,
	// as rotated; without a file (Kubernetes auth only) it is not served
	// there at all: use --audit-webhook-listen with its own token or client CA.
	switch {
	case cfg.InsecureNoAuth:
		wh = cfg.Audit.APIWebhook(nil, n.ag.AuditSink(), log, am)
	case apiTokens != nil:
		wh = cfg.Audit.APIWebhook(apiTokens.First(), n.ag.AuditSink(), log, am)
	}
	return wh, auth, nil
}

// agentOptions builds the optional parts: rules and sinks, audit lookup.
// The store itself is always the first lookup: after a restart it holds the
// records the audit sources will not deliver again.
func (n *Node) agentOptions(ctx context.Context, reg prometheus.Registerer) ([]agent.Option, error) {
	cfg := &n.cfg
	eng, disp, err := cfg.Alerts.build(ctx, &cfg.ES, cfg.Version, n.log, reg)
	if err != nil {
		return nil, err
	}
	n.disp = disp
	opts := []agent.Option{agent.WithAlerts(eng, nil)}
	if disp != nil {
		opts[0] = agent.WithAlerts(eng, disp)
	}
	if strings.HasPrefix(cfg.Store, "sqlite:") {
		// Only a node's own store: the fleet's Elasticsearch holds every
		// node's processes, and a node must take back only its own.
		opts = append(opts, agent.WithRestore(n.st, agent.DefaultRestoreMax))
	}
	// The alerts raised before a restart, for a late record to resolve.
	opts = append(opts, agent.WithAlertHistory(n.st))
	lookups := agent.Lookups{agent.NewStoredRecords(n.st)}
	if cfg.Lookup == "elasticsearch" {
		esCfg, err := cfg.ES.Resolve()
		if err != nil {
			return nil, err
		}
		l, err := elasticsearch.NewLookup(esCfg, elasticsearch.LookupConfig{Pattern: cfg.LookupPattern}, n.log, reg)
		if err != nil {
			return nil, err
		}
		lookups = append(lookups, l)
	}
	return append(opts, agent.WithAuditLookup(lookups, 4)), nil
}
