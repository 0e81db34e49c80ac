// Package cluster answers correlator queries for a whole cluster through
// kube-apiserver: it finds the node agents (the DaemonSet's pods), reaches
// each one through the API server's pod proxy with the caller's own
// credentials, fans a query out to them with a bound, and merges the
// answers, naming the nodes that did not answer. It does no printing.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/rs/zerolog"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
)

// Defaults match the Helm chart and deploy/kubernetes. The fan-out's
// answer 1,000 nodes, 5 % of them hanging, in about one NodeTimeout
// (docs/benchmarks.md): a hanging node holds one of the Concurrency slots
// until its NodeTimeout, so there are more slots than a large cluster has
// hanging nodes; DefaultDeadline is past NodeTimeout, so a hanging node
// is named as timed out unless more hang than there are slots.
const (
	DefaultAgentNamespace = "correlator"
	// DefaultAgentSelector selects the node agents and not the
	// control-plane audit shipper, which shares the name label.
	DefaultAgentSelector = "app.kubernetes.io/name=correlator,app.kubernetes.io/component=node-agent"
	// DefaultAgentPort is the name of the agent container's API port.
	DefaultAgentPort   = "api"
	DefaultConcurrency = 128
	DefaultNodeTimeout = 5 * time.Second
	// DefaultDeadline bounds a whole command (WithDeadline).
	DefaultDeadline = 8 * time.Second
	DefaultReaderSA = "correlator-reader"
	DefaultTokenTTL = 10 * time.Minute
	minTokenTTL     = 10 * time.Minute // TokenRequest's minimum
	// Unless the caller's config sets them, the client's rate limit
	// follows Concurrency (each page is a request): client-go's 5 a
	// second and burst of 10, or even 50 and 100, would queue 1,000
	// nodes' requests for many seconds. Pod proxy requests are
	// long-running for kube-apiserver, outside its max-inflight and
	// priority-and-fairness limits: Concurrency is their bound there.
	qpsPerSlot, burstPerSlot = 10, 20
	minQPS, minBurst         = 50, 100
)

// ErrNoAgent is returned when no agent pod runs on a node.
var ErrNoAgent = errors.New("no correlator agent on this node")

// ErrDeadline is the cause of a context WithDeadline ended: a fan-out
// then answers with the nodes that answered, and names the others as
// left (Failure.Left) rather than failed.
var ErrDeadline = errors.New("deadline passed")

// WithDeadline bounds everything asked with the returned context to d
// (0: no bound). When d passes, a fan-out stops asking and answers with
// what it has. A parent cancelled with ErrDeadline as its cause (a test
// deciding when the deadline passes) has the same effect.
func WithDeadline(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if d <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeoutCause(ctx, d, fmt.Errorf("%s %w", d, ErrDeadline))
}

// Config says how to reach kube-apiserver and the agents behind it.
type Config struct {
	// Rest is the caller's kube-apiserver config (kubeconfig, context,
	// exec plugins, impersonation). It is copied; QPS and Burst are
	// raised when unset, as a fan-out makes many small requests.
	Rest *rest.Config
	// HTTPClient carries every request when set (tests inject one);
	// nil builds one from Rest.
	HTTPClient *http.Client
	// AgentNamespace and AgentSelector find the agent pods; AgentPort
	// names their API container port.
	AgentNamespace, AgentSelector, AgentPort string
	// Concurrency bounds the nodes asked at once; NodeTimeout bounds
	// each node's whole answer (every page). The context's deadline
	// (WithDeadline) bounds them all.
	Concurrency int
	NodeTimeout time.Duration
	// Progress, when set, is called as nodes answer or fail (done of
	// total), one call at a time, and a last time with done == total
	// when a fan-out ends, the nodes the deadline left counted as done.
	Progress func(done, total int)
	Log      zerolog.Logger
}

func (c *Config) withDefaults() {
	if c.AgentNamespace == "" {
		c.AgentNamespace = DefaultAgentNamespace
	}
	if c.AgentSelector == "" {
		c.AgentSelector = DefaultAgentSelector
	}
	if c.AgentPort == "" {
		c.AgentPort = DefaultAgentPort
	}
	if c.Concurrency < 1 {
		c.Concurrency = DefaultConcurrency
	}
	if c.NodeTimeout <= 0 {
		c.NodeTimeout = DefaultNodeTimeout
	}
}

// Client queries every node agent of one cluster.
type Client struct {
	cfg  Config
	rest *rest.Config
	core corev1client.CoreV1Interface
	log  zerolog.Logger
	// token is the credential sent to the agents (ProxyAuthHeader);
	// set once by Authenticate, never logged.
	token string
}

// New builds a Client; it makes no request.
func New(cfg Config) (*Client, error) {
	if cfg.Rest == nil {
		return nil, errors.New("configuring cluster client: no kube-apiserver config")
	}
	cfg.withDefaults()
	rc := rest.CopyConfig(cfg.Rest)
	if rc.QPS == 0 {
		rc.QPS = float32(max(minQPS, qpsPerSlot*cfg.Concurrency))
		rc.Burst = max(minBurst, burstPerSlot*cfg.Concurrency)
	}
	var (
		core *corev1client.CoreV1Client
		err  error
	)
	if cfg.HTTPClient != nil {
		core, err = corev1client.NewForConfigAndClient(rc, cfg.HTTPClient)
	} else {
		core, err = corev1client.NewForConfig(rc)
	}
	if err != nil {
		return nil, fmt.Errorf("building kube-apiserver client: %w", err)
	}
	return &Client{cfg: cfg, rest: rc, core: core, log: cfg.Log.With().Str("component", "cluster").Logger()}, nil
}

// AgentNamespace is where the agents run.
func (c *Client) AgentNamespace() string { return c.cfg.AgentNamespace }

// withTimeout bounds one node's answer.
func (c *Client) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, c.cfg.NodeTimeout)
}
