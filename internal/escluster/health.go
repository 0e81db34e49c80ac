package escluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Health is the part of GET /_cluster/health that the tests look at.
type Health struct {
	Status           string `json:"status"`
	Nodes            int    `json:"number_of_nodes"`
	TimedOut         bool   `json:"timed_out"`
	UnassignedShards int    `json:"unassigned_shards"`
}

func (h Health) String() string {
	return fmt.Sprintf("status %s, %d nodes, %d unassigned shards", h.Status, h.Nodes, h.UnassignedShards)
}

// Health asks the first node that answers for the cluster's health.
func (c *Cluster) Health(ctx context.Context) (Health, error) {
	return c.health(ctx, url.Values{})
}

// WaitHealth waits until the cluster's status is status or better (green,
// yellow, red, as Elasticsearch's wait_for_status) with exactly nodes
// nodes, asking whichever node answers, until ctx ends.
func (c *Cluster) WaitHealth(ctx context.Context, status string, nodes int) error {
	var last Health
	var lastErr error
	for {
		wait := 20 * time.Second
		if d, ok := ctx.Deadline(); ok {
			wait = min(wait, time.Until(d)-500*time.Millisecond)
		}
		if wait < time.Second {
			wait = time.Second
		}
		q := url.Values{
			"wait_for_status": {status},
			"wait_for_nodes":  {strconv.Itoa(nodes)},
			"timeout":         {strconv.Itoa(int(wait.Seconds())) + "s"},
		}
		h, err := c.health(ctx, q)
		if err == nil && !h.TimedOut {
			return nil
		}
		if err == nil {
			last = h
		} else {
			lastErr = err
		}
		select {
		case <-ctx.Done():
			msg := fmt.Sprintf("waiting for status %s with %d nodes: %v", status, nodes, ctx.Err())
			if last.Status != "" {
				msg += "; last seen: " + last.String()
			}
			if lastErr != nil {
				return fmt.Errorf("%s; last error: %w", msg, lastErr)
			}
			return errors.New(msg)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// health GETs /_cluster/health?q from each URL in turn (those of nodes not
// killed through this Cluster first) until one answers. A 408 (the wait
// timed out) is an answer: its body says timed_out.
func (c *Cluster) health(ctx context.Context, q url.Values) (Health, error) {
	var errs []error
	for _, base := range c.liveFirst() {
		var h Health
		u := base + "/_cluster/health"
		if len(q) > 0 {
			u += "?" + q.Encode()
		}
		code, err := c.getJSON(ctx, u, &h)
		if err == nil && (code == http.StatusOK || code == http.StatusRequestTimeout) {
			return h, nil
		}
		if err == nil {
			err = fmt.Errorf("answered %d", code)
		}
		errs = append(errs, fmt.Errorf("%s: %w", base, err))
		if ctx.Err() != nil {
			break
		}
	}
	return Health{}, fmt.Errorf("asking for cluster health: %w", errors.Join(errs...))
}

// getJSON GETs u and decodes the JSON answer into v, returning the status.
func (c *Cluster) getJSON(ctx context.Context, u string, v any) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, err
	}
	if c.apiKey != "" {
		req.Header.Set("Authorization", "ApiKey "+c.apiKey)
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return resp.StatusCode, fmt.Errorf("reading the answer: %w", err)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return resp.StatusCode, fmt.Errorf("decoding the %d answer %.200q: %w", resp.StatusCode, body, err)
	}
	return resp.StatusCode, nil
}
