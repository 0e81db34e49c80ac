package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime/debug"
	"slices"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"
	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"

	"github.com/execid/correlator/pkg/agent"
	"github.com/execid/correlator/pkg/alert/delivery"
	"github.com/execid/correlator/pkg/api"
	"github.com/execid/correlator/pkg/auditlog"
	"github.com/execid/correlator/pkg/authn"
	"github.com/execid/correlator/pkg/capture"
	"github.com/execid/correlator/pkg/config"
	"github.com/execid/correlator/pkg/meta"
	"github.com/execid/correlator/pkg/store"
	"github.com/execid/correlator/pkg/store/elasticsearch"
)

// runOptions are `correlator run`'s settings; every one is a flag, and the
// config file and CORRELATOR_* variables name the same flags.
type runOptions struct {
	pprofListen    string
	configFile     string
	listen         string
	storeURL       string
	tokenFile      string
	tlsCert        string
	tlsKey         string
	insecureNoAuth bool
	authKubernetes bool
	podMap         string
	criSocket      string
	retention      time.Duration
	noCapture      bool
	audit          auditSourceOptions
	capture        *captureFlags
	agent          agent.Config
	es             esOptions
	alerts         alertOptions
	lookup         string
	lookupPattern  string
	memLimit       int64
	memLimitRatio  float64
}

func newRunCmd(g *globalOptions) *cobra.Command {
	o := &runOptions{capture: newCaptureFlags(true), agent: agent.Default()}
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run the node agent: capture, audit sources, join, store, API and metrics",
		Long: `run is the node agent: it loads correlator's eBPF probes, reads the audit
sources, joins each process to the exec session and user it belongs to,
stores sessions and processes, and serves the API and metrics.

` + kernelHelpPrefix + `its probes, on purpose. They are
pinned under --pin-path with the session lineage, the ring, the counters
and a heartbeat (it says so in its log), and keep watching while no agent
runs (a restart, an upgrade, a crash); the next agent adopts them and reads
what they saw meanwhile. ` + "`correlator uninstall`" + ` (the chart's pre-delete
hook) detaches and removes them. With --no-pin nothing is pinned and all is
detached when it exits; with --no-capture it loads nothing into the kernel.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var file []byte
			if o.configFile != "" {
				b, err := os.ReadFile(o.configFile)
				if err != nil {
					return fmt.Errorf("reading config file: %w", err)
				}
				file = b
			}
			if err := config.Apply(cmd.Flags(), file, os.LookupEnv); err != nil {
				return err
			}
			if err := o.validate(); err != nil {
				return err
			}
			if err := memoryLimit(o.memLimit, o.memLimitRatio, g.logger()); err != nil {
				return err
			}
			ctx, cancel := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer cancel()
			return o.run(ctx, g.logger())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.configFile, "config", "", "YAML file of settings (keys are flag names)")
	f.StringVar(&o.pprofListen, "pprof-listen", "", "loopback address serving Go's pprof profiles (off when empty)")
	f.StringVar(&o.listen, "listen", "127.0.0.1:8080", "address of the REST API")
	f.StringVar(&o.storeURL, "store", "sqlite:/var/lib/correlator/correlator.db", "store: sqlite:PATH, or elasticsearch (with --es-url)")
	f.StringVar(&o.tokenFile, "token-file", "", "file of bearer tokens the API accepts, one per line")
	f.StringVar(&o.tlsCert, "tls-cert", "", "API server certificate (PEM)")
	f.StringVar(&o.tlsKey, "tls-key", "", "API server key (PEM)")
	f.BoolVar(&o.insecureNoAuth, "insecure-no-auth", false, "serve the API without authentication (loopback --listen only)")
	f.BoolVar(&o.authKubernetes, "auth-kubernetes", false, "also accept Kubernetes tokens: TokenReview, then SubjectAccessReview for get on sessions in the correlator.execid.io group (in-cluster)")
	f.StringVar(&o.podMap, "pod-map", "", "static JSON or YAML list of {containerID, podUID, namespace, pod, container, labels}")
	f.StringVar(&o.criSocket, "cri-socket", "", "CRI runtime socket for pod metadata, e.g. /run/containerd/containerd.sock")
	f.DurationVar(&o.retention, "retention", 30*24*time.Hour, "delete sessions and processes older than this")
	f.BoolVar(&o.noCapture, "no-capture", false, "do not load the BPF probes (audit ingestion and API only)")
	f.DurationVar(&o.agent.Join.PendingTTL, "pending-ttl", o.agent.Join.PendingTTL, "how long a process waits for its audit record")
	f.DurationVar(&o.agent.Join.AuditLag, "audit-lag", o.agent.Join.AuditLag,
		"how late an exec request's audit record may reach this node; an ID-less exec's heuristic answer waits for it (the webhook batches for up to 30s)")
	f.DurationVar(&o.agent.Join.ClockSkew, "clock-skew", o.agent.Join.ClockSkew,
		"how far the node's clock may lag the apiserver's when pairing a verified root with its exec request")
	o.capture.add(f)
	f.Int64Var(&o.memLimit, "memory-limit-bytes", 0, "the container's memory limit (the chart passes limits.memory); the Go runtime then collects at --memory-limit-ratio of it")
	f.Float64Var(&o.memLimitRatio, "memory-limit-ratio", 0.8, "share of --memory-limit-bytes the Go heap may use before collecting hard")
	f.StringVar(&o.lookup, "audit-lookup", "", "ask this for audit records the node never saw: elasticsearch (with --es-url)")
	f.StringVar(&o.lookupPattern, "audit-lookup-pattern", elasticsearch.ElasticAgentAuditPattern,
		"Elastic Agent audit index pattern searched besides correlator's own (- for none)")
	o.audit.addFlags(f)
	o.es.addFlags(f)
	o.alerts.addFlags(f)
	return cmd
}

// validate checks the settings up front, with errors that say what to do.
func (o *runOptions) validate() error {
	var errs []error
	errs = append(errs, validateStore(o.storeURL, &o.es), o.alerts.validate(&o.es))
	switch o.lookup {
	case "":
	case "elasticsearch":
		if !o.es.configured() {
			errs = append(errs, errors.New("validating --audit-lookup elasticsearch: give --es-url"))
		}
	default:
		errs = append(errs, fmt.Errorf("validating --audit-lookup %q: want elasticsearch or nothing", o.lookup))
	}
	if _, _, err := net.SplitHostPort(o.listen); err != nil {
		errs = append(errs, fmt.Errorf("validating --listen %q: %w", o.listen, err))
	}
	switch {
	case o.insecureNoAuth && !api.IsLoopback(o.listen):
		errs = append(errs, fmt.Errorf("validating --insecure-no-auth: only allowed when --listen is a loopback address, not %q", o.listen))
	case !o.insecureNoAuth && o.tokenFile == "" && !o.authKubernetes:
		errs = append(errs, errors.New("validating authentication: the API requires --token-file or --auth-kubernetes (or --insecure-no-auth on loopback)"))
	}
	errs = append(errs, o.audit.validateWebhook())
	errs = append(errs, validatePprof(o.pprofListen))
	if (o.tlsCert == "") != (o.tlsKey == "") {
		errs = append(errs, errors.New("validating TLS: give both --tls-cert and --tls-key, or neither"))
	}
	if o.retention < time.Hour {
		errs = append(errs, fmt.Errorf("validating --retention %s: must be at least 1h", o.retention))
	}
	if !o.noCapture {
		errs = append(errs, o.capture.config().Validate())
	}
	return errors.Join(errs...)
}

// run builds every part that can fail before it starts any goroutine, so a
// failed start returns having started nothing; cleanups run in reverse
// order and their errors are returned, not dropped.
func (o *runOptions) run(ctx context.Context, log zerolog.Logger) (err error) {
	var cl cleanups
	defer func() { err = errors.Join(err, cl.run()) }()
	if o.pprofListen != "" {
		stopPprof, err := startPprof(o.pprofListen, log)
		if err != nil {
			return err
		}
		cl.add("stopping the pprof server", stopPprof)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	st, err := openBackend(ctx, o.storeURL, &o.es, log, reg)
	if err != nil {
		return err
	}
	cl.add("closing the store", st.Close)
	agentOpts, disp, err := o.agentOptions(ctx, st, log, reg)
	if err != nil {
		return err
	}
	if disp != nil {
		cl.add("closing the alert spools", disp.Close)
	}
	writer := agent.NewStoreWriter(st)
	cl.add("flushing the store", writer.Close)
	reg.MustRegister(store.NewWriterCollector(writer))
	res, err := meta.New(meta.Config{PodMapPath: o.podMap, CRISocket: o.criSocket, CacheSize: 4096}, log, reg)
	if err != nil {
		return err
	}
	cl.add("closing the pod metadata client", res.Close)
	// The heuristic leaves a bridged request to its bridge root only when
	// the kernel captures the bridge's key.
	o.agent.Join.BridgeCaptured = !o.noCapture && slices.Contains(o.capture.cfg.Keys, o.capture.cfg.BridgeKey)
	// The agent keeps its footprint under the limit memoryLimit set, if any.
	if l := debug.SetMemoryLimit(-1); l != math.MaxInt64 {
		o.agent.MemoryLimit = l
	}
	ag, err := agent.New(o.agent, res, writer, log, reg, agentOpts...)
	if err != nil {
		return err
	}
	am, err := auditlog.NewMetrics(reg)
	if err != nil {
		return err
	}
	// One reloading source per token file, shared by the API, the webhook
	// on the API listener and --audit-webhook-listen.
	tokens := newTokenFiles(log)
	o.audit.tokens = tokens
	var auth api.Authenticator
	var apiTokens *authn.File
	if !o.insecureNoAuth {
		if o.tokenFile != "" {
			if apiTokens, err = tokens.open(o.tokenFile); err != nil {
				return fmt.Errorf("opening --token-file: %w", err)
			}
		}
		if auth, err = o.authenticator(apiTokens, log); err != nil {
			return err
		}
	}
	var srcs []auditlog.Source
	if len(o.audit.logPaths) > 0 || o.audit.webhookListen != "" {
		if srcs, err = o.audit.sources(log, am); err != nil {
			return err
		}
	}
	var probe *capture.Probe
	var col *capture.Collector
	if !o.noCapture {
		if probe, err = capture.Load(o.capture.config(), log); err != nil {
			return err
		}
		cl.add("detaching the probes", probe.Close)
		col = capture.NewCollector(probe)
		reg.MustRegister(col)
		if err := probe.Attach(); err != nil {
			return err
		}
		logKernelState(log, o.capture.config())
	}
	rd := &readiness{store: writer}
	// The webhook on the API listener takes the token file's first token,
	// as rotated; without a file (Kubernetes auth only) it is not served
	// there at all: use --audit-webhook-listen with its own token or client CA.
	var wh http.Handler
	switch {
	case o.insecureNoAuth:
		wh = o.audit.apiWebhook(nil, ag.AuditSink(), log, am)
	case apiTokens != nil:
		wh = o.audit.apiWebhook(apiTokens.First(), ag.AuditSink(), log, am)
	}
	handler := api.NewHandler(st, api.Config{Auth: auth, Webhook: wh,
		Metrics: promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}),
		Ready:   rd.check}, log)
	srv := api.NewServer(handler, api.ServerConfig{Addr: o.listen})
	// Bind before saying "running": a taken port fails the start.
	ln, err := srv.Listen()
	if err != nil {
		return err
	}

	// Nothing below fails to start. Every goroutine is in g; a part that
	// ends before shutdown makes the agent unready and is logged.
	runCtx, stop := context.WithCancel(context.Background())
	defer stop()
	var g errgroup.Group
	goRun := func(name string, fn func(context.Context) error) {
		g.Go(func() error {
			err := fn(runCtx)
			if runCtx.Err() == nil {
				rd.partStopped(name, err)
				log.Error().Err(err).Str("component", name).Msg("stopped before shutdown")
			}
			if err != nil && !errors.Is(err, context.Canceled) {
				return fmt.Errorf("running %s: %w", name, err)
			}
			return nil
		})
	}
	goRun("agent", ag.Run)
	// Without a CRI socket the metadata refresher has nothing to run.
	g.Go(func() error { res.Run(runCtx); return nil })
	goRun("retention", func(ctx context.Context) error { return st.RunRetention(ctx, o.retention, time.Hour) })
	if disp != nil {
		goRun("alerts", disp.Run)
	}
	if probe != nil {
		boot, err := probe.Bootstrap()
		if err != nil {
			log.Warn().Err(err).Msg("bootstrapping lineage from procfs")
		}
		for _, ev := range boot {
			ag.Process(runCtx, ev)
		}
		goRun("capture", func(ctx context.Context) error {
			return probe.RunBatches(ctx, func(evs []capture.Event) {
				for _, ev := range evs {
					col.Observe(ev)
				}
				ag.ProcessBurst(ctx, evs)
			}, col.BadFrame)
		})
	}
	for _, s := range srcs {
		goRun("auditlog", func(ctx context.Context) error { return s.Run(ctx, ag.AuditSink()) })
	}
	srvErr := make(chan error, 1)
	go func() {
		if o.tlsCert != "" {
			srvErr <- srv.ServeTLS(ln, o.tlsCert, o.tlsKey)
		} else {
			srvErr <- srv.Serve(ln)
		}
	}()
	log.Info().Str("component", "run").Str("listen", ln.Addr().String()).Bool("capture", probe != nil).Msg("correlator running")

	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-srvErr:
		log.Error().Err(serveErr).Msg("API server stopped")
	}
	// Shut down in order: stop intake, drain the joiner; the cleanups then
	// flush the store and close the spools.
	shCtx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := srv.Shutdown(shCtx); err != nil {
		serveErr = errors.Join(serveErr, fmt.Errorf("shutting down the API server: %w", err))
	}
	stop()
	partsErr := g.Wait()
	log.Info().Str("component", "run").Msg("stopped")
	if errors.Is(serveErr, http.ErrServerClosed) {
		serveErr = nil
	}
	return errors.Join(serveErr, partsErr)
}

// agentOptions builds the optional parts: rules and sinks, audit lookup.
// The store itself is always the first lookup: after a restart it holds the
// records the audit sources will not deliver again.
func (o *runOptions) agentOptions(ctx context.Context, st agent.SessionReader, log zerolog.Logger, reg prometheus.Registerer) ([]agent.Option, *delivery.Dispatcher, error) {
	eng, disp, err := o.alerts.build(ctx, &o.es, log, reg)
	if err != nil {
		return nil, nil, err
	}
	opts := []agent.Option{agent.WithAlerts(eng, nil)}
	if disp != nil {
		opts[0] = agent.WithAlerts(eng, disp)
	}
	lookups := agent.Lookups{agent.NewStoredRecords(st)}
	if o.lookup == "elasticsearch" {
		cfg, err := o.es.config()
		if err != nil {
			return nil, nil, err
		}
		l, err := elasticsearch.NewLookup(cfg, elasticsearch.LookupConfig{Pattern: o.lookupPattern}, log, reg)
		if err != nil {
			return nil, nil, err
		}
		lookups = append(lookups, l)
	}
	opts = append(opts, agent.WithAuditLookup(lookups, 4))
	return opts, disp, nil
}
