package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/execid/correlator/internal/testutil"
	"github.com/execid/correlator/pkg/api"
)

// TestEndToEndStoreFull puts the store on a 2 MiB tmpfs and floods the
// webhook with exec records until the disk is full, as an operator's node
// would. The agent must then: answer the webhook with a retryable status
// at once (never hang, never a 2xx for what it cannot keep), say so in
// /readyz and /metrics, keep capturing, and recover by itself when space
// returns, with every record it acknowledged served afterwards.
func TestEndToEndStoreFull(t *testing.T) {
	testutil.RequireRoot(t)
	disk := t.TempDir()
	if err := unix.Mount("tmpfs", disk, "tmpfs", 0, "size=2m,mode=0700"); err != nil {
		t.Fatalf("mounting a 2 MiB tmpfs: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(disk, unix.MNT_DETACH) })
	env := newE2EEnv(t, testutil.ContainerConfig{})
	a := env.start("--store", "sqlite:"+filepath.Join(disk, "c.db"))
	hc := &http.Client{Timeout: testutil.EventuallyBound}

	// Flood until the first refusal. Each POST is one EventList of 20
	// records with 1 KiB of command, as a busy apiserver's batches are.
	var acked []string
	var refused int
	var refusedBatch []testutil.ExecRequest // resent after recovery, as kube-apiserver does
	var slowest time.Duration
	// Two refusals: the first batch's commit failed (its rows are held for
	// the retry); the second is refused at the door while the store fails.
	for post := 0; refused < 2; post++ {
		if post == 2000 {
			t.Fatalf("2000 batches stored on a 2 MiB disk: the flood never filled it")
		}
		var reqs []testutil.ExecRequest
		for range 20 {
			r := a.request("flood", "sh", "-c", strings.Repeat("x", 1024))
			reqs = append(reqs, r)
		}
		start := time.Now()
		code := postBody(t, hc, a.base+api.WebhookPath, testutil.EventListOf(reqs...))
		slowest = max(slowest, time.Since(start))
		switch code {
		case http.StatusOK:
			for _, r := range reqs {
				acked = append(acked, r.AuditID)
			}
		case http.StatusServiceUnavailable, http.StatusTooManyRequests:
			refused++
			refusedBatch = reqs
		default:
			t.Fatalf("webhook answered %d: want 200, or 503/429 to retry", code)
		}
	}
	t.Logf("figure: %d records acknowledged before the 2 MiB disk filled; slowest webhook answer %s", len(acked), slowest.Round(time.Millisecond))

	testutil.EventuallyNil(t, func() error {
		code, body := getBody(t, hc, a.base+"/readyz")
		if code != http.StatusServiceUnavailable || !strings.Contains(body, "store not writable") {
			return fmt.Errorf("/readyz %d %q while the disk is full", code, body)
		}
		return nil
	})
	page := metricsText(t, hc, a.base)
	if v := sample(page, "correlator_store_writable"); v != 0 {
		t.Errorf("correlator_store_writable = %v while the disk is full", v)
	}
	if sample(page, `correlator_store_commit_failures_total`) == 0 {
		t.Error("no commit failure counted")
	}
	if sample(page, `correlator_audit_webhook_refused_total{reason="sink_error"}`)+sample(page, `correlator_audit_webhook_refused_total{reason="busy"}`) == 0 {
		t.Error("the webhook's refusals are not counted")
	}
	// Capture goes on: an exec while the store is full is still decoded.
	before := sample(page, `correlator_capture_events_total{kind="exec"}`)
	a.exec(a.request("", "x"), "/bin/echo", "while-full")
	testutil.Eventually(t, "capture decodes execs while the store is full", func() bool {
		return sample(metricsText(t, hc, a.base), `correlator_capture_events_total{kind="exec"}`) > before
	})

	// Space returns: the agent recovers with no restart.
	freed := time.Now()
	if err := unix.Mount("tmpfs", disk, "tmpfs", unix.MS_REMOUNT, "size=64m,mode=0700"); err != nil {
		t.Fatalf("growing the tmpfs: %v", err)
	}
	testutil.EventuallyNil(t, func() error {
		if code, body := getBody(t, hc, a.base+"/readyz"); code != http.StatusOK {
			return fmt.Errorf("/readyz %d %q after space returned", code, body)
		}
		return nil
	})
	t.Logf("figure: ready again %s after space returned", time.Since(freed).Round(time.Millisecond))
	// The sender retries the refused batch: its stages were seen before
	// the refusal, and must now be stored before the 2xx.
	testutil.Eventually(t, "the webhook accepts the resent batch", func() bool {
		return postBody(t, hc, a.base+api.WebhookPath, testutil.EventListOf(refusedBatch...)) == http.StatusOK
	})
	for _, r := range refusedBatch {
		acked = append(acked, r.AuditID)
	}
	late := a.request("after", "sh")
	if code := postBody(t, hc, a.base+api.WebhookPath, late.EventList()); code != http.StatusOK {
		t.Fatalf("a new batch after recovery: %d", code)
	}
	acked = append(acked, late.AuditID)

	// Nothing acknowledged was lost: each session is served with its
	// audit records.
	for _, id := range acked {
		v, err := a.client.Session(context.Background(), id)
		if err != nil {
			t.Fatalf("session %s was acknowledged but is not served: %v", id, err)
		}
		if len(v.AuditRecords) == 0 {
			t.Fatalf("session %s was acknowledged but its audit records are not stored", id)
		}
	}
	if v := sample(metricsText(t, hc, a.base), `correlator_store_rows_total{outcome="dropped"}`); v != 0 {
		t.Logf("rows dropped while full (process rows beyond the held bound): %v", v)
	}
}

func postBody(t *testing.T, hc *http.Client, url string, body []byte) int {
	t.Helper()
	resp, err := hc.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

func getBody(t *testing.T, hc *http.Client, url string) (int, string) {
	t.Helper()
	resp, err := hc.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func metricsText(t *testing.T, hc *http.Client, base string) string {
	t.Helper()
	code, body := getBody(t, hc, base+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("GET /metrics: %d", code)
	}
	return body
}

// sample returns the value of the series written exactly as key on the
// page, 0 when absent.
func sample(page, key string) float64 {
	for _, line := range strings.Split(page, "\n") {
		if v, ok := strings.CutPrefix(line, key+" "); ok {
			f, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return f
		}
	}
	return 0
}
