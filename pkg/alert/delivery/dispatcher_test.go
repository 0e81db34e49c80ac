package delivery

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"

	"github.com/execid/correlator/pkg/store"

	itu "github.com/execid/correlator/internal/testutil"
)

func mkAlerts(from, n int) []store.Alert {
	out := make([]store.Alert, n)
	for i := range out {
		out[i] = store.Alert{ID: fmt.Sprintf("a%07d", from+i), Time: t0, Rule: "r", Severity: "low",
			Message: "m", AuditID: "aud", ProcessID: "p", Payload: json.RawMessage(`{"rule":{"name":"r"}}`)}
	}
	return out
}

// receiver is a webhook endpoint that records alert IDs.
type receiver struct {
	mu    sync.Mutex
	ids   map[string]int
	total int
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	var batch []store.Alert
	b, _ := io.ReadAll(req.Body)
	if err := json.Unmarshal(b, &batch); err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ids == nil {
		r.ids = map[string]int{}
	}
	for _, a := range batch {
		r.ids[a.ID]++
		r.total++
	}
}

func (r *receiver) distinct() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.ids)
}

// waitFor waits until cond holds. limit is how long the behaviour itself
// may take; itu.EventuallyBound is added so a busy machine makes the
// wait longer, never red.
func waitFor(t testing.TB, what string, limit time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit + itu.EventuallyBound)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func readIDs(t testing.TB, path string) map[string]int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	// A sink may be writing as this reads: only whole lines count, and a
	// tail without its newline is read again by the caller's next poll.
	if i := strings.LastIndexByte(string(b), '\n'); i >= 0 {
		b = b[:i+1]
	} else {
		b = nil
	}
	ids := map[string]int{}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if l == "" {
			continue
		}
		var a store.Alert
		if err := json.Unmarshal([]byte(l), &a); err != nil {
			t.Fatalf("bad line %q: %v", l, err)
		}
		ids[a.ID]++
	}
	return ids
}

// TestDispatcherRestart: alerts submitted while no delivery runs survive a
// close and reopen, and are delivered after it.
func TestDispatcherRestart(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "alerts.jsonl")
	open := func() *Dispatcher {
		spec, _ := ParseSinkSpec("file:" + out)
		fs, err := NewDeliverer(spec, SinkOptions{}, zerolog.Nop())
		if err != nil {
			t.Fatal(err)
		}
		d, err := NewDispatcher(DispatcherConfig{SpoolDir: filepath.Join(dir, "spool"), CloseTimeout: time.Nanosecond},
			[]Deliverer{fs}, zerolog.Nop(), prometheus.NewRegistry())
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	d := open()
	if err := d.Submit(context.Background(), mkAlerts(0, 250)); err != nil {
		t.Fatal(err)
	}
	d.Close() // a 1ns close timeout: nothing is delivered
	if n := len(readIDs(t, out)); n != 0 {
		t.Fatalf("%d alerts delivered before the restart", n)
	}
	d = open()
	if p := d.Pending("file:" + out); p != 250 {
		t.Fatalf("pending after reopen %d, want 250", p)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { d.Run(ctx); close(done) }()
	waitFor(t, "delivery", 30*time.Second, func() bool { return len(readIDs(t, out)) == 250 })
	cancel()
	<-done
	d.Close()
	for id, n := range readIDs(t, out) {
		if n != 1 {
			t.Errorf("alert %s delivered %d times", id, n)
		}
	}
}

// TestDispatcherOverflowCounted: a sink that is down while more alerts
// arrive than its spool holds; the overflow is counted per sink, the
// other sink loses nothing, and what is kept is delivered.
func TestDispatcherOverflowCounted(t *testing.T) {
	dir := t.TempDir()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // the webhook is down
	wspec, _ := ParseSinkSpec("webhook:http://" + addr + "/")
	ws, _ := NewDeliverer(wspec, SinkOptions{}, zerolog.Nop())
	fspec, _ := ParseSinkSpec("file:" + filepath.Join(dir, "out.jsonl"))
	fs, _ := NewDeliverer(fspec, SinkOptions{}, zerolog.Nop())
	reg := prometheus.NewRegistry()
	d, err := NewDispatcher(DispatcherConfig{SpoolDir: filepath.Join(dir, "spool"), SpoolMaxEntries: 400,
		InitialBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond, CloseTimeout: time.Second},
		[]Deliverer{ws, fs}, zerolog.Nop(), reg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { d.Run(ctx); close(done) }()
	// Each batch waits for the file sink to take the previous one: the
	// working sink never nears the bound, however slow the machine, while
	// the webhook's spool overflows.
	for i := range 10 {
		if err := d.Submit(ctx, mkAlerts(i*100, 100)); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "file delivery", 30*time.Second, func() bool { return len(readIDs(t, filepath.Join(dir, "out.jsonl"))) == (i+1)*100 })
	}
	dropped := testutil.ToFloat64(d.m.dropped.WithLabelValues(ws.Name(), "overflow"))
	kept := d.Pending(ws.Name())
	if dropped == 0 || kept > 400 || int(dropped)+kept != 1000 {
		t.Errorf("webhook: dropped %v + pending %d, want 1000 with pending <= 400", dropped, kept)
	}
	if v := testutil.ToFloat64(d.m.dropped.WithLabelValues(fs.Name(), "overflow")); v != 0 {
		t.Errorf("file sink dropped %v", v)
	}
	if v := testutil.ToFloat64(d.m.failures.WithLabelValues(ws.Name())); v == 0 {
		t.Error("no failed attempts counted")
	}
	if v := testutil.ToFloat64(d.m.depth.WithLabelValues(ws.Name())); int(v) != kept {
		t.Errorf("depth gauge %v, pending %d", v, kept)
	}
	// The webhook comes back: the kept alerts, the newest, arrive.
	rcv := &receiver{}
	ln, err = net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: rcv}
	go srv.Serve(ln)
	defer srv.Close()
	// Every kept alert arrives (the batch in flight when its segment was
	// dropped may arrive too: at least once).
	waitFor(t, "webhook delivery", 30*time.Second, func() bool {
		rcv.mu.Lock()
		defer rcv.mu.Unlock()
		for i := 1000 - kept; i < 1000; i++ {
			if rcv.ids[fmt.Sprintf("a%07d", i)] == 0 {
				return false
			}
		}
		return true
	})
	rcv.mu.Lock()
	_, newest := rcv.ids["a0000999"]
	rcv.mu.Unlock()
	if !newest {
		t.Error("the newest alert was not delivered")
	}
	if v := testutil.ToFloat64(d.m.sent.WithLabelValues(ws.Name())); int(v) < kept {
		t.Errorf("sent %v < %d", v, kept)
	}
	cancel()
	<-done
	d.Close()
}

func TestNewDispatcherErrors(t *testing.T) {
	if _, err := NewDispatcher(DispatcherConfig{}, nil, zerolog.Nop(), nil); err == nil {
		t.Error("no spool dir accepted")
	}
	p := filepath.Join(t.TempDir(), "x")
	spec, _ := ParseSinkSpec("file:" + p)
	a, _ := NewDeliverer(spec, SinkOptions{}, zerolog.Nop())
	b, _ := NewDeliverer(spec, SinkOptions{}, zerolog.Nop())
	if _, err := NewDispatcher(DispatcherConfig{SpoolDir: t.TempDir()}, []Deliverer{a, b}, zerolog.Nop(), nil); err == nil {
		t.Error("the same sink twice accepted")
	}
}
