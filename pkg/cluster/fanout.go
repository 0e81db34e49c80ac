package cluster

import (
	"cmp"
	"context"
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
// bounded by NodeTimeout, and collects the items and the failures.
// Progress is reported as nodes finish.
func fanOut[T any](ctx context.Context, c *Client, agents []Agent,
	each func(context.Context, Agent) ([]T, error)) ([][]T, []Failure) {
	results := make([][]T, len(agents))
	errs := make([]error, len(agents))
	sem := make(chan struct{}, c.cfg.Concurrency)
	var wg sync.WaitGroup
	var (
		done int
		mu   sync.Mutex // Progress is called from one goroutine at a time
	)
	progress := func(step int) {
		if c.cfg.Progress != nil {
			mu.Lock()
			done += step
			c.cfg.Progress(done, len(agents))
			mu.Unlock()
		}
	}
	progress(0)
	for i, a := range agents {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				errs[i] = ctx.Err()
				return
			}
			defer func() { <-sem }()
			nctx, cancel := c.withTimeout(ctx)
			defer cancel()
			results[i], errs[i] = each(nctx, a)
			progress(1)
		}()
	}
	wg.Wait()
	var fails []Failure
	for i, err := range errs {
		if err != nil {
			c.log.Debug().Str("node", agents[i].Node).Err(err).Msg("node did not answer")
			fails = append(fails, Failure{Node: agents[i].Node, Pod: agents[i].Pod, Error: err.Error()})
			results[i] = nil
		}
	}
	return results, fails
}

// fanOutAll finds every agent and fans out to them.
func fanOutAll[T any](ctx context.Context, c *Client, each func(context.Context, Agent) ([]T, error)) ([][]T, Answer[T], error) {
	var ans Answer[T]
	agents, missing, err := c.Agents(ctx)
	if err != nil {
		return nil, ans, err
	}
	ans.Nodes = len(agents) + len(missing)
	res, fails := fanOut(ctx, c, agents, each)
	ans.fail(slices.SortedFunc(slices.Values(slices.Concat(missing, fails)),
		func(a, b Failure) int { return cmp.Compare(a.Node, b.Node) })...)
	return res, ans, nil
}
