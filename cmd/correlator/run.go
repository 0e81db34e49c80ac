package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/execid/correlator/pkg/agent"
	"github.com/execid/correlator/pkg/config"
	"github.com/execid/correlator/pkg/node"
	"github.com/execid/correlator/pkg/store/elasticsearch"
)

// runOptions are `correlator run`'s settings; every one is a flag, and the
// config file and CORRELATOR_* variables name the same flags.
type runOptions struct {
	configFile    string
	node          node.Config
	capture       *captureFlags
	memLimit      int64
	memLimitRatio float64
}

func newRunCmd(g *globalOptions) *cobra.Command {
	o := &runOptions{capture: newCaptureFlags(true), node: node.Config{Agent: agent.Default(), Version: version}}
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
			o.node.Capture = o.capture.config()
			if err := o.node.Validate(); err != nil {
				return err
			}
			if err := node.SetMemoryLimit(o.memLimit, o.memLimitRatio, g.logger()); err != nil {
				return err
			}
			ctx, cancel := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer cancel()
			n, err := node.New(ctx, o.node, g.logger())
			if err != nil {
				return err
			}
			return n.Run(ctx)
		},
	}
	f, n := cmd.Flags(), &o.node
	f.StringVar(&o.configFile, "config", "", "YAML file of settings (keys are flag names)")
	f.StringVar(&n.PprofListen, "pprof-listen", "", "loopback address serving Go's pprof profiles (off when empty)")
	f.StringVar(&n.Listen, "listen", "127.0.0.1:8080", "address of the REST API")
	f.StringVar(&n.Store, "store", "sqlite:/var/lib/correlator/correlator.db", "store: sqlite:PATH, or elasticsearch (with --es-url)")
	f.StringVar(&n.TokenFile, "token-file", "", "file of bearer tokens the API accepts, one per line")
	f.StringVar(&n.TLSCert, "tls-cert", "", "API server certificate (PEM)")
	f.StringVar(&n.TLSKey, "tls-key", "", "API server key (PEM)")
	f.BoolVar(&n.InsecureNoAuth, "insecure-no-auth", false, "serve the API without authentication (loopback --listen only)")
	f.BoolVar(&n.AuthKubernetes, "auth-kubernetes", false, "also accept Kubernetes tokens: TokenReview, then SubjectAccessReview for get on sessions in the correlator.execid.io group (in-cluster)")
	f.StringVar(&n.PodMap, "pod-map", "", "static JSON or YAML list of {containerID, podUID, namespace, pod, container, labels}")
	f.StringVar(&n.CRISocket, "cri-socket", "", "CRI runtime socket for pod metadata, e.g. /run/containerd/containerd.sock")
	f.DurationVar(&n.Retention, "retention", 30*24*time.Hour, "delete sessions and processes older than this")
	f.BoolVar(&n.NoCapture, "no-capture", false, "do not load the BPF probes (audit ingestion and API only)")
	f.DurationVar(&n.Agent.Join.PendingTTL, "pending-ttl", n.Agent.Join.PendingTTL, "how long a process waits for its audit record")
	f.DurationVar(&n.Agent.Join.AuditLag, "audit-lag", n.Agent.Join.AuditLag,
		"how late an exec request's audit record may reach this node; an ID-less exec's heuristic answer waits for it (the webhook batches for up to 30s)")
	f.DurationVar(&n.Agent.Join.LateWindow, "late-window", n.Agent.Join.LateWindow,
		"how long after its start an exited exec-session process is kept for an audit record later than --pending-ttl (the clouds' delivery delay, a backlog); 0 keeps none")
	f.DurationVar(&n.Agent.Join.ClockSkew, "clock-skew", n.Agent.Join.ClockSkew,
		"how far the node's clock may lag the apiserver's when pairing a verified root with its exec request")
	o.capture.add(f)
	f.Int64Var(&o.memLimit, "memory-limit-bytes", 0, "the container's memory limit (the chart passes limits.memory); the Go runtime then collects at --memory-limit-ratio of it")
	f.Float64Var(&o.memLimitRatio, "memory-limit-ratio", 0.8, "share of --memory-limit-bytes the Go heap may use before collecting hard")
	f.StringVar(&n.Lookup, "audit-lookup", "", "ask this for audit records the node never saw: elasticsearch (with --es-url)")
	f.StringVar(&n.LookupPattern, "audit-lookup-pattern", elasticsearch.ElasticAgentAuditPattern,
		"Elastic Agent audit index pattern searched besides correlator's own (- for none)")
	auditSourceFlags(f, &n.Audit)
	esFlags(f, &n.ES)
	alertFlags(f, &n.Alerts)
	return cmd
}
