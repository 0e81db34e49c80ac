package escluster

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestClusterGreen: the shared cluster is green with all its nodes (three
// when this package started it), and answers as Elasticsearch does.
func TestClusterGreen(t *testing.T) {
	c := Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := c.WaitHealth(ctx, "green", c.Nodes()); err != nil {
		t.Fatal(err)
	}
	if !c.external && c.Nodes() != 3 {
		t.Fatalf("Nodes() = %d, want 3", c.Nodes())
	}
	var health struct {
		Status string `json:"status"`
		Nodes  int    `json:"number_of_nodes"`
	}
	if code := call(t, http.MethodGet, c.URL()+"/_cluster/health", nil, &health); code != http.StatusOK {
		t.Fatalf("GET /_cluster/health: %d", code)
	}
	if health.Status != "green" || health.Nodes != c.Nodes() {
		t.Fatalf("health = %+v, want green with %d nodes", health, c.Nodes())
	}
	for _, u := range c.URLs() {
		var nodes []struct {
			Name string `json:"name"`
		}
		if code := call(t, http.MethodGet, u+"/_cat/nodes?format=json", nil, &nodes); code != http.StatusOK {
			t.Fatalf("GET %s/_cat/nodes: %d", u, code)
		}
		if len(nodes) != c.Nodes() {
			t.Fatalf("%s lists %d nodes %v, want %d", u, len(nodes), nodes, c.Nodes())
		}
	}
}

// TestClusterSurvivesNodeLoss: an index of 3 shards with a replica each
// keeps every document through a node's crash. The cluster goes yellow with
// two nodes, counts all 1000 documents and takes 100 more; the node comes
// back on its data, the cluster turns green, and all 1100 are counted.
func TestClusterSurvivesNodeLoss(t *testing.T) {
	c := Shared(t)
	if c.external {
		t.Skip("the cluster was given by " + EnvURL + ": its nodes cannot be killed here")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := c.WaitHealth(ctx, "green", c.Nodes()); err != nil {
		t.Fatal(err)
	}

	// The victim: the last node that is not the elected master (fast: no
	// election); requests go to node 0, which stays.
	var master []struct {
		Node string `json:"node"`
	}
	if code := call(t, http.MethodGet, c.URLs()[0]+"/_cat/master?format=json", nil, &master); code != http.StatusOK || len(master) != 1 {
		t.Fatalf("GET /_cat/master: %d %v", code, master)
	}
	victim := c.Nodes() - 1
	for victim > 1 && nodeName(victim) == master[0].Node {
		victim--
	}
	if victim == 0 || nodeName(victim) == master[0].Node {
		t.Fatalf("no node other than node 0 and master %s to kill among %d", master[0].Node, c.Nodes())
	}
	base := c.URLs()[0]
	index := fmt.Sprintf("escluster-node-loss-%d", time.Now().UnixNano())
	idx := base + "/" + index

	settings := `{"settings": {"number_of_shards": 3, "number_of_replicas": 1,
		"index.unassigned.node_left.delayed_timeout": "10m"}}`
	if code := call(t, http.MethodPut, idx, []byte(settings), nil); code != http.StatusOK {
		t.Fatalf("creating index %s: %d", index, code)
	}
	t.Cleanup(func() { call(t, http.MethodDelete, idx, nil, nil) })
	if err := c.WaitHealth(ctx, "green", c.Nodes()); err != nil {
		t.Fatal(err)
	}
	bulk(t, idx, 0, 1000)
	if n := count(t, idx, 3); n != 1000 {
		t.Fatalf("count before the crash = %d, want 1000", n)
	}

	if err := c.KillNode(victim); err != nil {
		t.Fatal(err)
	}
	t.Logf("killed node %s (master: %s)", nodeName(victim), master[0].Node)
	t.Cleanup(func() { // leave the cluster whole for the next test
		if err := c.StartNode(victim); err != nil {
			t.Error(err)
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		if err := c.WaitHealth(ctx, "green", c.Nodes()); err != nil {
			t.Error(err)
		}
	})

	// Wait (server side) until the master has dropped the node, then the
	// cluster must be yellow: the replicas it held are unassigned, and the
	// delayed timeout keeps them so.
	var health struct {
		Status   string `json:"status"`
		Nodes    int    `json:"number_of_nodes"`
		TimedOut bool   `json:"timed_out"`
	}
	call(t, http.MethodGet, fmt.Sprintf("%s/_cluster/health?wait_for_nodes=%d&timeout=120s", base, c.Nodes()-1), nil, &health)
	if health.TimedOut || health.Nodes != c.Nodes()-1 || health.Status != "yellow" {
		t.Fatalf("health after killing %s = %+v, want yellow with %d nodes", nodeName(victim), health, c.Nodes()-1)
	}
	if n := count(t, idx, 3); n != 1000 {
		t.Fatalf("count with %s down = %d, want 1000", nodeName(victim), n)
	}
	bulk(t, idx, 1000, 100)
	if n := count(t, idx, 3); n != 1100 {
		t.Fatalf("count after writing with %s down = %d, want 1100", nodeName(victim), n)
	}

	start := time.Now()
	if err := c.StartNode(victim); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitHealth(ctx, "green", c.Nodes()); err != nil {
		t.Fatal(err)
	}
	t.Logf("node %s back and the cluster green after %s", nodeName(victim), time.Since(start).Round(100*time.Millisecond))
	for _, u := range []string{base, c.URLs()[victim]} {
		if n := count(t, u+"/"+index, 3); n != 1100 {
			t.Fatalf("count through %s after the node came back = %d, want 1100", u, n)
		}
	}
}

// bulk indexes documents from..from+n with _bulk and fails on any error.
func bulk(t *testing.T, idx string, from, n int) {
	t.Helper()
	var body bytes.Buffer
	for i := from; i < from+n; i++ {
		fmt.Fprintf(&body, "{\"index\":{\"_id\":\"%d\"}}\n{\"n\":%d,\"msg\":\"document %d\"}\n", i, i, i)
	}
	var resp struct {
		Errors bool              `json:"errors"`
		Items  []json.RawMessage `json:"items"`
	}
	if code := call(t, http.MethodPost, idx+"/_bulk", body.Bytes(), &resp); code != http.StatusOK || resp.Errors || len(resp.Items) != n {
		t.Fatalf("_bulk of %d documents: %d, errors %v, %d items", n, code, resp.Errors, len(resp.Items))
	}
}

// count refreshes the index and counts its documents, checking that all
// its shards answered.
func count(t *testing.T, idx string, shards int) int {
	t.Helper()
	var refresh struct {
		Shards struct {
			Failed int `json:"failed"`
		} `json:"_shards"`
	}
	if code := call(t, http.MethodPost, idx+"/_refresh", nil, &refresh); code != http.StatusOK || refresh.Shards.Failed != 0 {
		t.Fatalf("refreshing %s: %d, %+v", idx, code, refresh)
	}
	var resp struct {
		Count  int `json:"count"`
		Shards struct {
			Successful int `json:"successful"`
			Failed     int `json:"failed"`
		} `json:"_shards"`
	}
	if code := call(t, http.MethodGet, idx+"/_count", nil, &resp); code != http.StatusOK {
		t.Fatalf("counting %s: %d", idx, code)
	}
	if resp.Shards.Successful != shards || resp.Shards.Failed != 0 {
		t.Fatalf("counting %s: shards %+v, want %d successful", idx, resp.Shards, shards)
	}
	return resp.Count
}

// call sends a JSON (or NDJSON, for _bulk) request, decodes the answer into
// out when given, and returns the status. Every answer must carry
// X-Elastic-Product: Elasticsearch, as go-elasticsearch requires.
func call(t *testing.T, method, u string, body []byte, out any) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, u, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if strings.HasSuffix(req.URL.Path, "/_bulk") {
		req.Header.Set("Content-Type", "application/x-ndjson")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, u, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the answer: %v", method, u, err)
	}
	if got := resp.Header.Get("X-Elastic-Product"); got != "Elasticsearch" {
		t.Fatalf("%s %s: X-Elastic-Product = %q, want Elasticsearch", method, u, got)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("%s %s: decoding %.300q: %v", method, u, data, err)
		}
	}
	return resp.StatusCode
}
