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

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/execid/correlator/pkg/cluster"
	"github.com/execid/correlator/pkg/render"
	"github.com/execid/correlator/pkg/store/elasticsearch"
)

// exitPartial is the exit status of an answer some nodes did not give
// (cluster.ErrPartial): they failed, or had not answered when --deadline
// passed.
const exitPartial = 3

// kubectlOptions are the plugin's flags: kubectl's own (kubeconfig,
// context, namespace, impersonation), how to find and ask the agents,
// and Elasticsearch.
type kubectlOptions struct {
	loading   *clientcmd.ClientConfigLoadingRules
	overrides *clientcmd.ConfigOverrides
	kube      clientcmd.ClientConfig

	output, since, until string
	format               render.Format
	limit, concurrency   int
	nodeTimeout          time.Duration
	deadline             time.Duration
	agentNamespace       string
	agentSelector        string
	agentPort            string
	authMode, readerSA   string
	tokenTTL             time.Duration
	elasticsearch        string
	es                   elasticsearch.Connection
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
	fs.DurationVar(&o.nodeTimeout, "node-timeout", cluster.DefaultNodeTimeout, "how long one node may take to answer (every page); a node that takes longer failed")
	fs.DurationVar(&o.deadline, "deadline", cluster.DefaultDeadline, "how long the whole command may take: then it prints what the nodes that answered hold, "+
		"names the nodes not answered yet or not asked, and exits 3 (0: no deadline)")
	fs.StringVar(&o.authMode, "auth", string(cluster.AuthAuto), "credential for the agents: auto, kubeconfig (your bearer token) or serviceaccount (a token minted for --reader-service-account)")
	fs.StringVar(&o.readerSA, "reader-service-account", cluster.DefaultReaderSA, "service account in --agent-namespace to mint agent tokens for")
	fs.DurationVar(&o.tokenTTL, "token-ttl", cluster.DefaultTokenTTL, "lifetime of a minted token (10m at least)")
	fs.StringVar(&o.elasticsearch, "elasticsearch", os.Getenv("CORRELATOR_ELASTICSEARCH"), "query this Elasticsearch store instead of the agents")
	o.es = elasticsearch.Connection{Config: elasticsearch.DefaultConfig(), PasswordEnv: "CORRELATOR_ES_PASSWORD"}
	fs.StringVar(&o.es.APIKeyFile, "es-api-key-file", "", "file holding the Elasticsearch API key (base64 id:key)")
	fs.StringVar(&o.es.Username, "es-username", "", "Elasticsearch user (basic auth; the password comes from $CORRELATOR_ES_PASSWORD)")
	fs.StringVar(&o.es.CACert, "es-ca-cert", "", "PEM file of CAs that signed the Elasticsearch certificates")
	fs.StringVar(&o.es.IndexPrefix, "es-index-prefix", "correlator", "prefix of correlator's indices")
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
		return "", cluster.KubeconfigError("reading the namespace from the kubeconfig", err, o.loading)
	}
	return ns, nil
}

// asker asks Elasticsearch with --elasticsearch, or else finds the
// agents with the caller's kubeconfig and picks their credential; what
// it leaves unasked goes to stderr.
func (o *kubectlOptions) asker(ctx context.Context, stderr io.Writer) (*cluster.Asker, error) {
	src, err := o.source(ctx, stderr)
	if err != nil {
		return nil, err
	}
	return cluster.NewAsker(src, func(note string) { fmt.Fprintln(stderr, note) }), nil
}

func (o *kubectlOptions) source(ctx context.Context, stderr io.Writer) (cluster.Source, error) {
	var err error
	if o.format, err = render.ParseFormat(o.output); err != nil {
		return nil, fmt.Errorf("validating --output: %w", err)
	}
	log := o.logger()
	if o.elasticsearch != "" {
		log.Debug().Str("url", o.elasticsearch).Msg("querying Elasticsearch instead of the agents")
		es := o.es
		es.URLs = []string{o.elasticsearch}
		cfg, err := es.Resolve()
		if err != nil {
			return nil, err
		}
		s, err := elasticsearch.Open(ctx, cfg, log, nil)
		if err != nil {
			return nil, fmt.Errorf("opening Elasticsearch: %w", err)
		}
		return cluster.NewESSource(s, time.Now), nil
	}
	rc, err := o.kube.ClientConfig()
	if err != nil {
		return nil, cluster.KubeconfigError("loading the kubeconfig", err, o.loading)
	}
	cfg := cluster.Config{Rest: rc, AgentNamespace: o.agentNamespace, AgentSelector: o.agentSelector,
		AgentPort: o.agentPort, Concurrency: o.concurrency, NodeTimeout: o.nodeTimeout, Log: log,
		Progress: cluster.TerminalProgress(stderr)}
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

// query is a listing's since, until and limit, narrowed to the pods
// selector matches in namespace.
func (o *kubectlOptions) query(namespace, selector string) cluster.Query {
	q := url.Values{}
	if o.since != "" {
		q.Set("since", o.since)
	}
	if o.until != "" {
		q.Set("until", o.until)
	}
	return cluster.Query{Filters: q, Limit: o.limit, Namespace: namespace, Selector: selector}
}

// bounded is the command's context, ended by --deadline.
func (o *kubectlOptions) bounded(cmd *cobra.Command) (context.Context, context.CancelFunc) {
	return cluster.WithDeadline(cmd.Context(), o.deadline)
}

// show prints an answer in -o's format, then names on stderr the nodes
// that did not answer; the error says whether the answer is partial.
func (o *kubectlOptions) show(cmd *cobra.Command, incomplete error, print func(*render.Printer) error) error {
	if err := print(render.New(cmd.OutOrStdout(), o.format)); err != nil {
		return err
	}
	o.unanswered(cmd.ErrOrStderr(), incomplete)
	return incomplete
}

// unanswered names on w the nodes that did not answer, then says how
// many of them --deadline left, apart from those that failed.
func (o *kubectlOptions) unanswered(w io.Writer, incomplete error) {
	render.Unanswered(w, incomplete)
	var inc *cluster.Incomplete
	if !errors.As(incomplete, &inc) {
		return
	}
	var unanswered, unasked int
	for _, f := range inc.Unreachable {
		switch f.Left {
		case cluster.LeftUnanswered:
			unanswered++
		case cluster.LeftUnasked:
			unasked++
		}
	}
	if unanswered+unasked == 0 {
		return
	}
	fmt.Fprintf(w, "--deadline %s passed before %d nodes answered: %d asked, not answered yet; %d not asked",
		o.deadline, unanswered+unasked, unanswered, unasked)
	if unasked > 0 {
		fmt.Fprintf(w, " (a --concurrency above %d asks more at once)", o.concurrency)
	}
	fmt.Fprintln(w)
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

Each command takes at most --deadline: then it prints what the nodes that
answered hold and names the others, those asked and not answered yet apart
from those not asked (under "unreachable", with "left", in -o json/yaml).

Exit status: 0 complete answer, 3 partial answer (some nodes did not
answer, or had not when --deadline passed; they are listed on stderr and
under "unreachable" in -o json/yaml), 1 error or no node answered.`),
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	o.addFlags(cmd.PersistentFlags())
	cmd.AddCommand(newWhoCmd(o), newClusterSessionsCmd(o), newClusterSessionCmd(o), newAlertsCmd(o))
	nameCommands(cmd, plugin)
	return cmd
}
