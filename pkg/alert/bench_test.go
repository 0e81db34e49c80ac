package alert

import (
	"context"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// benchDispatch submits b.N alerts in Submit calls of 100 and waits until
// the sink has them all; one op is one alert, end to end (spooled, fsynced,
// read back, delivered).
func benchDispatch(b *testing.B, sink Deliverer, delivered func() int) {
	d, err := NewDispatcher(DispatcherConfig{SpoolDir: filepath.Join(b.TempDir(), "spool")},
		[]Deliverer{sink}, zerolog.Nop(), prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { d.Run(ctx); close(done) }()
	const batch = 100
	alerts := mkAlerts(0, b.N)
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i += batch {
		if err := d.Submit(ctx, alerts[i:min(i+batch, b.N)]); err != nil {
			b.Fatal(err)
		}
	}
	waitFor(b, "delivery", 5*time.Minute, func() bool { return delivered() >= b.N })
	el := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/el.Seconds(), "alerts/s")
	cancel()
	<-done
	d.Close()
	if n := delivered(); n != b.N {
		b.Fatalf("delivered %d of %d", n, b.N)
	}
}

func BenchmarkDispatchFile(b *testing.B) {
	p := filepath.Join(b.TempDir(), "alerts.jsonl")
	spec, _ := ParseSinkSpec("file:" + p)
	fs, err := NewDeliverer(spec, SinkOptions{}, zerolog.Nop())
	if err != nil {
		b.Fatal(err)
	}
	sent := 0
	counted := &countingSink{Deliverer: fs, n: &sent}
	benchDispatch(b, counted, counted.count)
	if got := len(readIDs(b, p)); got != b.N {
		b.Fatalf("file holds %d distinct alerts, want %d", got, b.N)
	}
}

func BenchmarkDispatchWebhook(b *testing.B) {
	rcv := &receiver{}
	srv := httptest.NewServer(rcv)
	defer srv.Close()
	spec, _ := ParseSinkSpec("webhook:" + srv.URL + "/alerts")
	ws, err := NewDeliverer(spec, SinkOptions{}, zerolog.Nop())
	if err != nil {
		b.Fatal(err)
	}
	benchDispatch(b, ws, rcv.distinct)
}
