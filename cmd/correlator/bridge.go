package main

import (
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/execid/correlator/pkg/bridge"
)

// bridgeFlags binds `correlator bridge`'s flags onto cfg.
func bridgeFlags(fs *pflag.FlagSet, cfg *bridge.Config) {
	fs.StringVar(&cfg.Listen, "listen", cfg.Listen, "HTTPS address the apiserver calls the webhook on")
	fs.StringVar(&cfg.CertFile, "tls-cert", "", "serving certificate (PEM), re-read when it changes")
	fs.StringVar(&cfg.KeyFile, "tls-key", "", "serving key (PEM), re-read when it changes")
	fs.DurationVar(&cfg.CertReload, "cert-reload-interval", cfg.CertReload, "how often the certificate files are checked for a rotation")
	fs.StringVar(&cfg.MetricsListen, "metrics-listen", "", "plain-HTTP address for /metrics (empty: /metrics on the webhook's HTTPS listener)")
	fs.StringVar(&cfg.Key, "key", cfg.Key, "environment key the exec command is prefixed with (the agent's keys must include it)")
	fs.Int64Var(&cfg.MaxBodyBytes, "max-body-bytes", cfg.MaxBodyBytes, "largest AdmissionReview accepted (larger: HTTP 413, the failurePolicy decides)")
	fs.BoolVar(&cfg.PodLookup, "pod-lookup", false, "read each exec's pod (get on pods) to honour the "+bridge.SkipAnnotation+" annotation and skip Windows pods")
	fs.DurationVar(&cfg.PodCacheTTL, "pod-cache-ttl", cfg.PodCacheTTL, "how long a looked-up pod is remembered")
	fs.IntVar(&cfg.PodCacheSize, "pod-cache-size", cfg.PodCacheSize, "pods remembered at most")
	fs.DurationVar(&cfg.LookupTimeout, "pod-lookup-timeout", cfg.LookupTimeout, "bound on one pod lookup (then the exec is rewritten anyway)")
}

// newBridgeCmd runs the exec bridge, the mutating admission webhook that
// gives each exec an ID until the cluster runs KEP-6035.
func newBridgeCmd(g *globalOptions) *cobra.Command {
	cfg := bridge.Default()
	cmd := &cobra.Command{
		Use:   "bridge",
		Short: "Run the exec bridge: a mutating admission webhook that prefixes each pods/exec command with env <key>=<fresh id>",
		Long: `Runs the exec bridge, the mutating admission webhook that gives each
pods/exec request an ID (env <key>=<fresh id> before its command) until the
cluster runs KEP-6035; the agents' probes read it in the exec'd argv.

` + leavesNothing,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return bridge.Run(ctx, cfg, g.logger().With().Str("component", "bridge").Logger())
		},
	}
	bridgeFlags(cmd.Flags(), &cfg)
	cmd.Flags().StringVar(&cfg.Kubeconfig, "kubeconfig", "", "kubeconfig for --pod-lookup (empty: the pod's service account, in-cluster)")
	return cmd
}
