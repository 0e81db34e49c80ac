package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/rs/zerolog"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/execid/correlator/pkg/cluster"
)

// exitPartial is the exit status of an answer some nodes did not give.
const exitPartial = 3

// errPartial marks a partial answer: printed, with the missing nodes on
// stderr; main exits with exitPartial.
var errPartial = errors.New("partial answer")

// errNoAnswer is an answer no node gave (every node asked failed): an
// error, exit status 1, with each node's reason on stderr.
var errNoAnswer = errors.New("no node answered")

// kubectlOptions are the plugin's flags: kubectl's own (kubeconfig,
// context, namespace, impersonation), how to find and ask the agents,
// and Elasticsearch.
type kubectlOptions struct {
	loading   *clientcmd.ClientConfigLoadingRules
	overrides *clientcmd.ConfigOverrides
	kube      clientcmd.ClientConfig

	output, since, until string
	limit, concurrency   int
	nodeTimeout          time.Duration
	agentNamespace       string
	agentSelector        string
	agentPort            string
	authMode, readerSA   string
	tokenTTL             time.Duration
	elasticsearch        string
	es                   esOptions
	verbose              int
}

func (o *kubectlOptions) addFlags(fs *pflag.FlagSet) {
	o.loading = clientcmd.NewDefaultClientConfigLoadingRules()
	o.overrides = &clientcmd.ConfigOverrides{}
	fs.StringVar(&o.loading.ExplicitPath, "kubeconfig", "", "path to the kubeconfig file")
	kf := clientcmd.RecommendedConfigOverrideFlags("")
	// --user filters by the correlator user; kubectl's --user (the
	// kubeconfig user) is --kube-user here.
	kf.ContextOverrideFlags.AuthInfoName.LongName = "kube-user"
	clientcmd.BindOverrideFlags(o.overrides, fs, kf)
	o.kube = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(o.loading, o.overrides)

	fs.StringVar(&o.agentNamespace, "agent-namespace", cluster.DefaultAgentNamespace, "namespace of correlator's node agents")
	fs.StringVar(&o.agentSelector, "agent-selector", cluster.DefaultAgentSelector, "label selector of the node agent pods")
	fs.StringVar(&o.agentPort, "agent-port", cluster.DefaultAgentPort, "name of the agent container's API port")
	fs.IntVar(&o.concurrency, "concurrency", cluster.DefaultConcurrency, "nodes asked at once")
	fs.DurationVar(&o.nodeTimeout, "node-timeout", cluster.DefaultNodeTimeout, "how long one node may take to answer")
	fs.StringVar(&o.authMode, "auth", string(cluster.AuthAuto), "credential for the agents: auto, kubeconfig (your bearer token) or serviceaccount (a token minted for --reader-service-account)")
	fs.StringVar(&o.readerSA, "reader-service-account", cluster.DefaultReaderSA, "service account in --agent-namespace to mint agent tokens for")
	fs.DurationVar(&o.tokenTTL, "token-ttl", cluster.DefaultTokenTTL, "lifetime of a minted token (10m at least)")
	fs.StringVar(&o.elasticsearch, "elasticsearch", os.Getenv("CORRELATOR_ELASTICSEARCH"), "query this Elasticsearch store instead of the agents")
	fs.StringVar(&o.es.apiKeyFile, "es-api-key-file", "", "file holding the Elasticsearch API key (base64 id:key)")
	fs.StringVar(&o.es.username, "es-username", "", "Elasticsearch user (basic auth; the password comes from $CORRELATOR_ES_PASSWORD)")
	fs.StringVar(&o.es.caCert, "es-ca-cert", "", "PEM file of CAs that signed the Elasticsearch certificates")
	fs.StringVar(&o.es.indexPrefix, "es-index-prefix", "correlator", "prefix of correlator's indices")
	o.es.passwordEnv = "CORRELATOR_ES_PASSWORD"
	fs.CountVarP(&o.verbose, "verbose", "v", "say how the agents were found and reached (which credential), -v or -v=1")
}

// addOutputFlags are the flags of the listing commands.
func (o *kubectlOptions) addOutputFlags(fs *pflag.FlagSet, listing bool) {
	fs.StringVarP(&o.output, "output", "o", "", "output format: wide, json or yaml (default: a table)")
	if listing {
		fs.StringVar(&o.since, "since", "", "only after this time (RFC 3339, or a duration such as 24h)")
		fs.StringVar(&o.until, "until", "", "only before this time")
		fs.IntVar(&o.limit, "limit", 100, "most rows, merged across nodes (newest first)")
	}
}

func (o *kubectlOptions) logger() zerolog.Logger {
	lvl := zerolog.WarnLevel
	if o.verbose > 0 {
		lvl = zerolog.DebugLevel
	}
	return zerolog.New(zerolog.ConsoleWriter{Out: os.Stderr, NoColor: true, TimeFormat: time.TimeOnly}).
		Level(lvl).With().Timestamp().Str("component", "kubectl-correlator").Logger()
}

// namespace is -n, or the kubeconfig context's.
func (o *kubectlOptions) namespace() (string, error) {
	ns, _, err := o.kube.Namespace()
	if err != nil {
		return "", o.kubeconfigError("reading the namespace from the kubeconfig", err)
	}
	return ns, nil
}

// source answers the plugin's queries: the agents through kube-apiserver
// (cluster.Client) or Elasticsearch.
type source interface {
	Who(ctx context.Context, namespace, pod, container string, q url.Values, limit int, processes bool) (cluster.WhoAnswer, error)
	Sessions(ctx context.Context, q url.Values, limit int) (cluster.Answer[cluster.Session], error)
	Session(ctx context.Context, auditID string) (cluster.Answer[cluster.SessionView], error)
	Alerts(ctx context.Context, q url.Values, limit int) (cluster.Answer[cluster.Alert], error)
}

// source opens Elasticsearch with --elasticsearch, or else finds the
// agents with the caller's kubeconfig and picks their credential.
func (o *kubectlOptions) source(ctx context.Context, stderr io.Writer) (source, error) {
	switch o.output {
	case "", "wide", "json", "yaml":
	default:
		return nil, fmt.Errorf("validating --output %q: want wide, json or yaml", o.output)
	}
	log := o.logger()
	if o.elasticsearch != "" {
		log.Debug().Str("url", o.elasticsearch).Msg("querying Elasticsearch instead of the agents")
		return openESSource(ctx, o, log)
	}
	rc, err := o.kube.ClientConfig()
	if err != nil {
		return nil, o.kubeconfigError("loading the kubeconfig", err)
	}
	cfg := cluster.Config{Rest: rc, AgentNamespace: o.agentNamespace, AgentSelector: o.agentSelector,
		AgentPort: o.agentPort, Concurrency: o.concurrency, NodeTimeout: o.nodeTimeout, Log: log}
	if f, ok := stderr.(*os.File); ok && (isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd())) {
		cfg.Progress = func(done, total int) {
			if done < total {
				fmt.Fprintf(stderr, "\rquerying nodes %d/%d", done, total)
			} else {
				fmt.Fprint(stderr, "\r\033[K")
			}
		}
	}
	c, err := cluster.New(cfg)
	if err != nil {
		return nil, err
	}
	how, err := c.Authenticate(ctx, cluster.Auth{Mode: cluster.AuthMode(o.authMode), ServiceAccount: o.readerSA, TTL: o.tokenTTL})
	if err != nil {
		return nil, err
	}
	log.Debug().Str("server", rc.Host).Str("credential", how).Msg("reaching the agents through kube-apiserver's pod proxy")
	return c, nil
}

// filters are the list query's shared parameters.
func (o *kubectlOptions) filters() url.Values {
	q := url.Values{}
	if o.since != "" {
		q.Set("since", o.since)
	}
	if o.until != "" {
		q.Set("until", o.until)
	}
	return q
}

// emit writes v as -o json or yaml; it reports whether it did.
func (o *kubectlOptions) emit(w io.Writer, v any) (bool, error) {
	switch o.output {
	case "json":
		return true, printJSON(w, v)
	case "yaml":
		b, err := yaml.Marshal(v)
		if err != nil {
			return true, fmt.Errorf("encoding YAML: %w", err)
		}
		_, err = w.Write(b)
		return true, err
	}
	return false, nil
}

// finish names the nodes that did not answer and makes the exit status
// say the answer is partial, or an error when no node answered.
func finish(stderr io.Writer, nodes int, fails []cluster.Failure) error {
	if len(fails) == 0 {
		return nil
	}
	what, err := "partial answer", errPartial
	if len(fails) >= nodes {
		what, err = "no answer", errNoAnswer
	}
	fmt.Fprintf(stderr, "%s: %d of %d nodes did not answer:\n", what, len(fails), nodes)
	for _, f := range fails {
		fmt.Fprintf(stderr, "  %s: %s\n", f.Node, f.Error)
	}
	return err
}

// newKubectlCmd is the plugin: `kubectl correlator ...` (plugin), or
// `correlator kubectl ...`.
func newKubectlCmd(plugin bool) *cobra.Command {
	o := &kubectlOptions{}
	cmd := &cobra.Command{
		Use:   "kubectl",
		Short: "Cluster-wide answers from correlator's node agents, through kube-apiserver with your kubeconfig",
		Long: strings.TrimSpace(`
Ask every correlator node agent through kube-apiserver's pod proxy, with
your own kubeconfig credentials (exec plugins, impersonation and contexts
work as in kubectl). Your RBAC decides what you may read: bind the
correlator-responder roles (docs/kubectl.md).

Exit status: 0 complete answer, 3 partial answer (some nodes did not
answer; they are listed on stderr and under "unreachable" in -o json/yaml),
1 error.`),
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	o.addFlags(cmd.PersistentFlags())
	cmd.AddCommand(newWhoCmd(o), newClusterSessionsCmd(o), newClusterSessionCmd(o), newAlertsCmd(o))
	nameCommands(cmd, plugin)
	return cmd
}
