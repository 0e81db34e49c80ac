package cluster

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
)

// Answer is a merged answer from every node asked. Partial is set when a
// node did not answer; Unreachable says which and why.
type Answer[T any] struct {
	Items       []T       `json:"items"`
	Partial     bool      `json:"partial"`
	Unreachable []Failure `json:"unreachable,omitempty"`
	// Nodes is how many nodes were asked or found without an agent.
	Nodes int `json:"nodes"`
	// Truncated is set when the nodes held more items than the limit.
	Truncated bool `json:"truncated,omitempty"`
}

func (a *Answer[T]) fail(f ...Failure) {
	a.Unreachable = append(a.Unreachable, f...)
	a.Partial = len(a.Unreachable) > 0
}

// fanOut runs each on every agent, at most Concurrency at once, each
// bounded by NodeTimeout, and hands each node's items to merge as the
// node answers (one call at a time), so that only what merge keeps
// stays. It returns the nodes that did not answer: failed, or left when
// ctx ended first (ErrDeadline). It returns when every node is done or
// ctx ends, whichever comes first: a node that would answer later is
// not waited for. Progress is reported as nodes finish.
func fanOut[T any](ctx context.Context, c *Client, agents []Agent,
	each func(context.Context, Agent) ([]T, error), merge func([]T)) []Failure {
	const (
		unasked = iota
		asked
		finished
	)
	state := make([]int, len(agents))
	errs := make([]error, len(agents))
	var (
		mu     sync.Mutex // guards the above, next, done, closed; merge and Progress run under it
		next   int
		done   int
		closed bool
	)
	progress := func() {
		if c.cfg.Progress != nil {
			c.cfg.Progress(done, len(agents))
		}
	}
	progress()
	// take hands out the next node to ask, until every one is asked, ctx
	// ends or the fan-out has returned.
	take := func() (int, bool) {
		mu.Lock()
		defer mu.Unlock()
		if closed || next == len(agents) || ctx.Err() != nil {
			return 0, false
		}
		next++
		state[next-1] = asked
		return next - 1, true
	}
	var wg sync.WaitGroup
	for range min(c.cfg.Concurrency, len(agents)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i, ok := take(); ok; i, ok = take() {
				items, err := askNode(ctx, c, agents[i], each)
				mu.Lock()
				// A node whose request ctx cut short is left, not failed.
				if !closed && (err == nil || ctx.Err() == nil) {
					if err == nil {
						merge(items)
					}
					state[i], errs[i] = finished, err
					done++
					progress()
				}
				mu.Unlock()
			}
		}()
	}
	all := make(chan struct{})
	go func() { wg.Wait(); close(all) }()
	select {
	case <-all:
	case <-ctx.Done():
	}
	mu.Lock()
	defer mu.Unlock()
	closed = true
	if done < len(agents) {
		done = len(agents)
		progress()
	}
	var fails []Failure
	for i, a := range agents {
		f := Failure{Node: a.Node, Pod: a.Pod}
		switch {
		case state[i] == finished && errs[i] == nil:
			continue
		case state[i] == finished:
			f.Error = errs[i].Error()
		case state[i] == asked:
			f.Left, f.Error = LeftUnanswered, fmt.Sprintf("asked, no answer yet: %v", context.Cause(ctx))
		default:
			f.Left, f.Error = LeftUnasked, fmt.Sprintf("not asked: %v", context.Cause(ctx))
		}
		c.log.Debug().Str("node", a.Node).Str("left", f.Left).Str("error", f.Error).Msg("node did not answer")
		fails = append(fails, f)
	}
	return fails
}

// askNode is one node's answer within NodeTimeout; a node that takes
// longer says so.
func askNode[T any](ctx context.Context, c *Client, a Agent, each func(context.Context, Agent) ([]T, error)) ([]T, error) {
	nctx, cancel := c.withTimeout(ctx)
	defer cancel()
	items, err := each(nctx, a)
	if err != nil && ctx.Err() == nil && errors.Is(nctx.Err(), context.DeadlineExceeded) {
		return nil, fmt.Errorf("no answer within the node timeout (%s): %w", c.cfg.NodeTimeout, err)
	}
	return items, err
}

// fanOutAll finds every agent and fans out to them.
func fanOutAll[T any](ctx context.Context, c *Client, each func(context.Context, Agent) ([]T, error),
	merge func([]T)) (Answer[T], error) {
	var ans Answer[T]
	agents, missing, err := c.Agents(ctx)
	if err != nil {
		return ans, err
	}
	ans.Nodes = len(agents) + len(missing)
	fails := fanOut(ctx, c, agents, each, merge)
	ans.fail(slices.SortedFunc(slices.Values(slices.Concat(missing, fails)),
		func(a, b Failure) int { return cmp.Compare(a.Node, b.Node) })...)
	return ans, nil
}
