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

// Defaults match the Helm chart and deploy/kubernetes.
const (
	DefaultAgentNamespace = "correlator"
	// DefaultAgentSelector selects the node agents and not the
	// control-plane audit shipper, which shares the name label.
	DefaultAgentSelector = "app.kubernetes.io/name=correlator,app.kubernetes.io/component=node-agent"
	// DefaultAgentPort is the name of the agent container's API port.
	DefaultAgentPort    = "api"
	DefaultConcurrency  = 8
	DefaultNodeTimeout  = 30 * time.Second
	DefaultReaderSA     = "correlator-reader"
	DefaultTokenTTL     = 10 * time.Minute
	minTokenTTL         = 10 * time.Minute // TokenRequest's minimum
	defaultQPS, defBurs = 50, 100
)

// ErrNoAgent is returned when no agent pod runs on a node.
var ErrNoAgent = errors.New("no correlator agent on this node")

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
	// each node's whole answer (every page).
	Concurrency int
	NodeTimeout time.Duration
	// Progress, when set, is called as nodes answer (done of total).
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
		rc.QPS, rc.Burst = defaultQPS, defBurs
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
