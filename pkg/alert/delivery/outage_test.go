package delivery

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"
)

// TestWebhookOutage30s: the webhook's listener is closed for 30 s and then
// reopened on the same port while alerts keep coming; every alert arrives,
// and deduplicating by ID leaves exactly the submitted set.
func TestWebhookOutage30s(t *testing.T) {
	if testing.Short() {
		t.Skip("takes 35 s")
	}
	rcv := &receiver{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	srv := &http.Server{Handler: rcv}
	go srv.Serve(ln)

	spec, _ := ParseSinkSpec("webhook:http://" + addr + "/alerts")
	ws, err := NewDeliverer(spec, SinkOptions{}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	d, err := NewDispatcher(DispatcherConfig{SpoolDir: filepath.Join(t.TempDir(), "spool"), BatchSize: 50,
		InitialBackoff: 100 * time.Millisecond, MaxBackoff: 2 * time.Second, DeliverTimeout: 2 * time.Second},
		[]Deliverer{ws}, zerolog.Nop(), reg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { d.Run(ctx); close(done) }()

	submitted := 0
	submit := func(n int) {
		if err := d.Submit(ctx, mkAlerts(submitted, n)); err != nil {
			t.Fatal(err)
		}
		submitted += n
	}
	submit(200)
	waitFor(t, "delivery before the outage", 10*time.Second, func() bool { return rcv.distinct() == 200 })

	srv.Close() // closes the listener and every connection
	down := time.Now()
	for time.Since(down) < 30*time.Second {
		submit(100)
		time.Sleep(time.Second)
	}
	before := rcv.distinct()
	if before != 200 {
		t.Fatalf("%d alerts arrived while the receiver was down", before-200)
	}
	ln, err = net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("reopening the receiver on %s: %v", addr, err)
	}
	srv = &http.Server{Handler: rcv}
	go srv.Serve(ln)
	defer srv.Close()
	submit(100)
	waitFor(t, "delivery after the outage", 30*time.Second, func() bool { return rcv.distinct() == submitted })
	cancel()
	<-done
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	for i := range submitted {
		if rcv.ids[fmt.Sprintf("a%07d", i)] == 0 {
			t.Errorf("alert %d missing", i)
		}
	}
	if len(rcv.ids) != submitted {
		t.Errorf("%d distinct IDs, submitted %d", len(rcv.ids), submitted)
	}
	t.Logf("submitted %d, received %d (%d duplicates), failed attempts %v, retried alerts %v",
		submitted, rcv.total, rcv.total-submitted,
		testutil.ToFloat64(d.m.failures.WithLabelValues(ws.Name())), testutil.ToFloat64(d.m.retries.WithLabelValues(ws.Name())))
	if testutil.ToFloat64(d.m.retries.WithLabelValues(ws.Name())) == 0 {
		t.Error("no retries counted across a 30 s outage")
	}
}
