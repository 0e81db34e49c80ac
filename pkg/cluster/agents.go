package cluster

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
)

// Agent is one node agent, reached through the pod proxy.
type Agent struct {
	Node, Namespace, Pod string
	// Port is the API port's number; Scheme http or https (the agent
	// serves TLS when its probes do).
	Port   string
	Scheme string
}

// proxyName is the pod proxy's name: [scheme:]pod:port.
func (a Agent) proxyName() string {
	if a.Scheme == "https" {
		return "https:" + a.Pod + ":" + a.Port
	}
	return a.Pod + ":" + a.Port
}

// Failure is a node that did not answer, and why. Left is set on a node
// the deadline (WithDeadline, or any end of the context) left: asked and
// not answered yet, or not asked; a node that failed on its own (an
// error, its NodeTimeout) has none.
type Failure struct {
	Node  string `json:"node"`
	Pod   string `json:"pod,omitempty"`
	Error string `json:"error"`
	Left  string `json:"left,omitempty"`
}

// Failure.Left: why a node the deadline left did not answer.
const (
	LeftUnanswered = "unanswered" // asked, no answer yet
	LeftUnasked    = "unasked"    // not asked yet
)

// Agents lists one agent per node that runs one. Failures are the agent
// pods that cannot be asked (not running, no API port) and, when the
// caller may list nodes, the nodes without an agent.
func (c *Client) Agents(ctx context.Context) ([]Agent, []Failure, error) {
	pods, err := c.core.Pods(c.cfg.AgentNamespace).List(ctx, metav1.ListOptions{LabelSelector: c.cfg.AgentSelector})
	if err != nil {
		return nil, nil, fmt.Errorf("listing agent pods in %s (%s): %w", c.cfg.AgentNamespace, c.cfg.AgentSelector, err)
	}
	agents, fails := c.pick(pods.Items)
	have := map[string]bool{}
	for _, a := range agents {
		have[a.Node] = true
	}
	for _, f := range fails {
		have[f.Node] = true
	}
	nodes, err := c.core.Nodes().List(ctx, metav1.ListOptions{})
	switch {
	case err != nil:
		// Listing nodes only finds nodes without an agent; without the
		// right to, the answer covers the agents found.
		c.log.Debug().Err(err).Msg("listing nodes; nodes without an agent are not reported")
	default:
		for _, n := range nodes.Items {
			if !have[n.Name] {
				fails = append(fails, Failure{Node: n.Name, Error: ErrNoAgent.Error()})
			}
		}
	}
	slices.SortFunc(fails, func(a, b Failure) int { return cmp.Compare(a.Node, b.Node) })
	c.log.Debug().Int("agents", len(agents)).Int("without", len(fails)).Msg("agents found")
	return agents, fails, nil
}

// AgentOn finds the agent on node.
func (c *Client) AgentOn(ctx context.Context, node string) (Agent, error) {
	pods, err := c.core.Pods(c.cfg.AgentNamespace).List(ctx, metav1.ListOptions{LabelSelector: c.cfg.AgentSelector,
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String()})
	if err != nil {
		return Agent{}, fmt.Errorf("listing agent pods on node %s: %w", node, err)
	}
	agents, fails := c.pick(pods.Items)
	for _, a := range agents {
		if a.Node == node {
			return a, nil
		}
	}
	if len(fails) > 0 {
		return Agent{}, fmt.Errorf("finding the agent on node %s: %s", node, fails[0].Error)
	}
	return Agent{}, fmt.Errorf("finding the agent on node %s: %w", node, ErrNoAgent)
}

// agentsOn finds the agents on nodes: with AgentOn for one node, else
// from one list of every agent pod rather than a list a node. A node
// whose agent cannot be found is a failure.
func (c *Client) agentsOn(ctx context.Context, nodes []string) ([]Agent, []Failure) {
	var agents []Agent
	var fails []Failure
	if len(nodes) == 1 {
		a, err := c.AgentOn(ctx, nodes[0])
		if err != nil {
			return nil, []Failure{{Node: nodes[0], Error: err.Error()}}
		}
		return []Agent{a}, nil
	}
	if len(nodes) == 0 {
		return nil, nil
	}
	pods, err := c.core.Pods(c.cfg.AgentNamespace).List(ctx, metav1.ListOptions{LabelSelector: c.cfg.AgentSelector})
	if err != nil {
		for _, n := range nodes {
			fails = append(fails, Failure{Node: n,
				Error: fmt.Sprintf("listing agent pods in %s (%s): %v", c.cfg.AgentNamespace, c.cfg.AgentSelector, err)})
		}
		return nil, fails
	}
	all, bad := c.pick(pods.Items)
	byNode := map[string]Agent{}
	for _, a := range all {
		byNode[a.Node] = a
	}
	badOn := map[string]Failure{}
	for _, f := range bad {
		badOn[f.Node] = f
	}
	for _, n := range nodes {
		a, ok := byNode[n]
		switch f, broken := badOn[n]; {
		case ok:
			agents = append(agents, a)
		case broken:
			fails = append(fails, Failure{Node: n, Error: fmt.Sprintf("finding the agent on node %s: %s", n, f.Error)})
		default:
			fails = append(fails, Failure{Node: n, Error: fmt.Sprintf("finding the agent on node %s: %v", n, ErrNoAgent)})
		}
	}
	return agents, fails
}

// PodNode is the node a pod runs on; found is false when the pod is gone.
func (c *Client) PodNode(ctx context.Context, namespace, pod string) (node string, found bool, err error) {
	p, err := c.core.Pods(namespace).Get(ctx, pod, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("getting pod %s/%s: %w", namespace, pod, err)
	}
	return p.Spec.NodeName, true, nil
}

// pick keeps one agent per node: a running pod with the API port, ready
// ones first, then the newest (a rolling update runs two for a while).
func (c *Client) pick(pods []corev1.Pod) ([]Agent, []Failure) {
	slices.SortFunc(pods, func(a, b corev1.Pod) int {
		if r := cmp.Compare(b2i(ready(&b)), b2i(ready(&a))); r != 0 {
			return r
		}
		return b.CreationTimestamp.Compare(a.CreationTimestamp.Time)
	})
	seen := map[string]bool{}
	var agents []Agent
	var fails []Failure
	failed := map[string]int{}
	for i := range pods {
		p := &pods[i]
		node := p.Spec.NodeName
		if node == "" || seen[node] {
			continue
		}
		a, err := c.agentOf(p)
		if err != nil {
			if _, ok := failed[node]; !ok {
				failed[node] = len(fails)
				fails = append(fails, Failure{Node: node, Pod: p.Name, Error: err.Error()})
			}
			continue
		}
		seen[node] = true
		agents = append(agents, a)
	}
	// A node with one good pod and one broken one is fine.
	fails = slices.DeleteFunc(fails, func(f Failure) bool { return seen[f.Node] })
	slices.SortFunc(agents, func(a, b Agent) int { return cmp.Compare(a.Node, b.Node) })
	return agents, fails
}

func (c *Client) agentOf(p *corev1.Pod) (Agent, error) {
	if p.Status.Phase != corev1.PodRunning {
		return Agent{}, fmt.Errorf("agent pod %s is %s", p.Name, cmp.Or(string(p.Status.Phase), "not running"))
	}
	for _, ct := range p.Spec.Containers {
		for _, port := range ct.Ports {
			if port.Name != c.cfg.AgentPort {
				continue
			}
			scheme := "http"
			if pr := ct.ReadinessProbe; pr != nil && pr.HTTPGet != nil && pr.HTTPGet.Scheme == corev1.URISchemeHTTPS {
				scheme = "https"
			}
			return Agent{Node: p.Spec.NodeName, Namespace: p.Namespace, Pod: p.Name,
				Port: strconv.Itoa(int(port.ContainerPort)), Scheme: scheme}, nil
		}
	}
	return Agent{}, fmt.Errorf("agent pod %s has no container port named %q", p.Name, c.cfg.AgentPort)
}

func ready(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
