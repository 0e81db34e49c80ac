package nodeharness

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/execid/correlator/internal/ociimage"
	"github.com/execid/correlator/internal/testutil"
	"github.com/execid/correlator/pkg/api"
)

// loadRuns is how many times TestAgentPodAmbiguousUnderLoad runs the
// two-record case.
const loadRuns = 20

// TestAgentPodAmbiguousUnderLoad is TestAgentPod's "CRI exec matching two
// records", loadRuns times, while busy goroutines keep every core of the
// machine (agent, containerd and runc included) short of CPU. An ExecSync
// with no ID and two requests that fit it equally is ambiguous between
// both, every time: the answer waits for every record that could fit it,
// so the order and pace in which the agent reads them cannot make it name
// one user. Each run's two records are written in one append, as the
// apiserver's log backend would; the tailer may read them in one batch or
// two, and the agent used to serve the first one's answer in between.
func TestAgentPodAmbiguousUnderLoad(t *testing.T) {
	testutil.RequireRoot(t)
	dir := t.TempDir()
	n := Start(t, Options{Archives: []string{buildCorrelatorImage(t, dir)}})
	n.WaitImage(ociimage.CorrelatorRef)
	agent := n.RunAgentPod(t, filepath.Join("..", "..", "deploy", "helm", "correlator"), dir)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("agent log:\n%s", tail(n.ContainerLog(agent.ContainerID), 6000))
		}
	})
	client := &api.Client{BaseURL: agent.Base, Token: agent.Token, HTTP: &http.Client{Timeout: 10 * time.Second}}
	podID, err := n.RunPod("team-a", "web", testutil.RandomUUID(), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctr, err := n.StartContainer(podID, "app", ociimage.BusyboxRef, []string{"/bin/sleep", "100000"})
	if err != nil {
		t.Fatal(err)
	}

	// The hog: a busy loop per core and one more, until the test ends.
	ctx, stop := context.WithCancel(context.Background())
	var hog sync.WaitGroup
	for range runtime.NumCPU() + 1 {
		hog.Go(func() {
			for x := uint64(1); ctx.Err() == nil; x++ {
				for i := 0; i < 1<<16; i++ {
					x = x*6364136223846793005 + 1442695040888963407
				}
			}
		})
	}
	t.Cleanup(func() { stop(); hog.Wait() })

	// The runs go side by side, each polling its root from the moment its
	// records are written, as TestAgentPod does: a transient answer (the
	// first record read alone) is seen if the agent ever serves one.
	results := make([]error, loadRuns)
	var runs sync.WaitGroup
	for i := range loadRuns {
		runs.Go(func() { results[i] = ambiguousRun(n, client, agent, ctr) })
	}
	runs.Wait()
	ok := 0
	for i, err := range results {
		if err != nil {
			t.Errorf("run %d: %v", i, err)
			continue
		}
		ok++
	}
	t.Logf("%d of %d runs ambiguous between both requests under a CPU hog of %d busy goroutines", ok, loadRuns, runtime.NumCPU()+1)
}

// ambiguousRun is one run: an ExecSync with no ID, the two requests that
// fit it written in one append, and every answer the API gives for its root
// until one is given: it must be ambiguous between both, with no ID.
func ambiguousRun(n *Node, client *api.Client, agent *AgentPod, ctr string) error {
	marker := "load-" + testutil.RandomUUID()[:8]
	cmd := []string{"/bin/sh", "-c", "/bin/echo " + marker + "; exit 0"}
	if stdout, stderr, code, err := n.CRIExec(ctr, cmd); err != nil || code != 0 || !strings.Contains(stdout, marker) {
		return fmt.Errorf("ExecSync: %v, exit %d, stdout %q, stderr %q", err, code, stdout, stderr)
	}
	var reqs []testutil.ExecRequest
	for _, user := range []string{"frank", "grace"} {
		reqs = append(reqs, testutil.ExecRequest{AuditID: testutil.RandomUUID(), User: user, Groups: []string{"dev"},
			Namespace: "team-a", Pod: "web", Container: "app", Command: cmd, Received: time.Now(), Duration: 2 * time.Second})
	}
	if err := appendFile(agent.AuditLog, append(reqs[0].LogLines(), reqs[1].LogLines()...)); err != nil {
		return err
	}
	want := []string{reqs[0].AuditID, reqs[1].AuditID}
	slices.Sort(want)
	return testutil.Until("the root with "+marker+" is decided", func() (bool, error) {
		page, err := client.Processes(context.Background(), url.Values{"pod": {"web"}, "command": {marker}})
		if err != nil {
			return false, err
		}
		root := byMarkerRoot(page.Items, marker)
		if root == nil || root.Attribution == "" {
			return false, nil
		}
		got := slices.Sorted(slices.Values(root.Candidates))
		if root.Attribution != "ambiguous" || root.AuditID != "" || !slices.Equal(got, want) {
			return false, fmt.Errorf("attributed %q to %q, candidates %v; want ambiguous, no ID, candidates %v",
				root.Attribution, root.AuditID, got, want)
		}
		return true, nil
	})
}

// appendFile appends lines to path in one write, as the apiserver's log
// backend does.
func appendFile(path string, lines []byte) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	if _, err := f.Write(lines); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
