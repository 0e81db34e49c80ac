package delivery

import (
	"bufio"
	"context"
	"net"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"sync/atomic"
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

// BenchmarkDispatchSyslogTCP delivers over RFC 6587 octet-counted TCP to a
// receiver on loopback that parses every message strictly (RFC 5424) and
// counts distinct alert IDs.
func BenchmarkDispatchSyslogTCP(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	var mu sync.Mutex
	seen := map[string]bool{}
	var bad atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					msg, err := readOctetCounted(r)
					if err != nil {
						return
					}
					m, err := parseRFC5424(msg)
					if err != nil {
						bad.Add(1)
						continue
					}
					mu.Lock()
					seen[m.SD[sdID]["id"]] = true
					mu.Unlock()
				}
			}()
		}
	}()
	spec, err := ParseSinkSpec("syslog+tcp://" + ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	s, err := NewDeliverer(spec, SinkOptions{}, zerolog.Nop())
	if err != nil {
		b.Fatal(err)
	}
	benchDispatch(b, s, func() int { mu.Lock(); defer mu.Unlock(); return len(seen) })
	if n := bad.Load(); n > 0 {
		b.Fatalf("%d messages failed strict RFC 5424 parsing", n)
	}
}
