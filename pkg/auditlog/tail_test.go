package auditlog

import (
	"compress/gzip"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	itu "github.com/execid/correlator/internal/testutil"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"
	"gopkg.in/natefinch/lumberjack.v2"
)

// execLine is one apiserver-encoded exec event; pad makes lines long enough
// for lumberjack to rotate often.
func execLine(id string, pad int) string {
	return fmt.Sprintf(`{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":%q,"stage":"ResponseStarted",`+
		`"requestURI":"/api/v1/namespaces/ns/pods/p/exec?command=id\u0026container=c\u0026stdout=true","verb":"get",`+
		`"user":{"username":"alice","groups":["system:authenticated"]},"sourceIPs":["10.0.0.1"],"userAgent":"kubectl/v1.35.0",`+
		`"objectRef":{"resource":"pods","namespace":"ns","name":"p","apiVersion":"v1","subresource":"exec"},`+
		`"responseStatus":{"metadata":{},"code":101},"requestReceivedTimestamp":"2026-01-02T03:04:05.600000Z",`+
		`"stageTimestamp":"2026-01-02T03:04:05.600000Z","annotations":{"authorization.k8s.io/decision":"allow","pad":%q}}`+"\n",
		id, strings.Repeat("x", pad))
}

// collector is a Sink that counts each auditID.
type collector struct {
	mu   sync.Mutex
	seen map[string]int
	n    int
}

func newCollector() *collector { return &collector{seen: map[string]int{}} }

func (c *collector) sink(_ context.Context, evs []Event) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, ev := range evs {
		c.seen[ev.AuditID]++
		c.n++
	}
	return nil
}

func (c *collector) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// waitFor polls until the collector holds n events; the deadline only
// bounds a hung test, it asserts nothing about speed.
func (c *collector) waitFor(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(itu.EventuallyBound)
	for c.count() < n {
		if time.Now().After(deadline) {
			t.Fatalf("got %d events, want %d", c.count(), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (c *collector) exactlyOnce(t *testing.T, ids []string) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, id := range ids {
		if c.seen[id] != 1 {
			t.Errorf("%s delivered %d times", id, c.seen[id])
		}
	}
	if len(c.seen) != len(ids) || c.n != len(ids) {
		t.Errorf("delivered %d events for %d IDs, want %d", c.n, len(c.seen), len(ids))
	}
}

func startTailer(t *testing.T, cfg TailConfig, c *collector) (stop func()) {
	t.Helper()
	cfg.PollInterval = 5 * time.Millisecond
	tl, err := NewTailer(cfg, zerolog.Nop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- tl.Run(ctx, c.sink) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("tailer: %v", err)
		}
	}
}

// TestTailLumberjackRestart writes through lumberjack (the apiserver's own
// rotation: rename, then create) while the tailer is stopped and restarted
// from its checkpoint twice; every record must arrive exactly once.
func TestTailLumberjackRestart(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.log")
	lj := &lumberjack.Logger{Filename: path, MaxSize: 1}
	defer lj.Close()
	cfg := TailConfig{Paths: []string{path}, CheckpointDir: filepath.Join(dir, "cp"), BatchLines: 64}
	c := newCollector()

	var ids []string
	write := func(n int) {
		for range n {
			id := fmt.Sprintf("id-%05d", len(ids))
			ids = append(ids, id)
			if _, err := lj.Write([]byte(execLine(id, 900))); err != nil {
				t.Fatal(err)
			}
		}
	}
	write(500)
	stop := startTailer(t, cfg, c)
	// Without Backlog a first start reads only the live file, so let the
	// tailer open it before lumberjack rotates it away.
	c.waitFor(t, 500)
	write(1500) // rotates while tailing
	c.waitFor(t, 1000)
	stop()
	write(1500) // rotates while stopped: resume from the renamed file
	stop = startTailer(t, cfg, c)
	write(500)
	c.waitFor(t, len(ids))
	stop()
	stop = startTailer(t, cfg, c)
	write(10)
	c.waitFor(t, len(ids))
	stop()
	c.exactlyOnce(t, ids)
	if rotated := rotatedSiblings(path); len(rotated) < 3 {
		t.Fatalf("lumberjack rotated only %d times", len(rotated))
	}
}

// TestTailCopyTruncate follows logrotate's copytruncate: same inode, size
// drops to zero, writing goes on.
func TestTailCopyTruncate(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.log")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var ids []string
	write := func(n int) {
		for range n {
			id := fmt.Sprintf("ct-%04d", len(ids))
			ids = append(ids, id)
			if _, err := f.WriteString(execLine(id, 10)); err != nil {
				t.Fatal(err)
			}
		}
	}
	c := newCollector()
	stop := startTailer(t, TailConfig{Paths: []string{path}, CheckpointDir: filepath.Join(dir, "cp")}, c)
	defer stop()
	write(200)
	c.waitFor(t, 200)
	old, _ := os.ReadFile(path)
	if err := os.WriteFile(path+".1", old, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(0); err != nil {
		t.Fatal(err)
	}
	write(50)
	c.waitFor(t, 250)
	c.exactlyOnce(t, ids)
}

// TestTailBacklog reads rotated files, gzip'd or not, oldest first, then the
// live file, and remembers them across a restart.
func TestTailBacklog(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.log")
	var ids []string
	lines := func(prefix string, n int) string {
		var b strings.Builder
		for i := range n {
			id := fmt.Sprintf("%s-%03d", prefix, i)
			ids = append(ids, id)
			b.WriteString(execLine(id, 0))
		}
		return b.String()
	}
	gzPath := filepath.Join(dir, "audit-2026-01-01T00-00-00.000.log.gz")
	var gzBuf strings.Builder
	zw := gzip.NewWriter(&gzBuf)
	zw.Write([]byte(lines("gz", 30)))
	zw.Close()
	mustWrite(t, gzPath, gzBuf.String())
	plain := filepath.Join(dir, "audit-2026-01-01T01-00-00.000.log")
	mustWrite(t, plain, lines("plain", 20))
	mustWrite(t, path, lines("live", 10))
	old := time.Now().Add(-2 * time.Hour)
	os.Chtimes(gzPath, old, old)
	os.Chtimes(plain, old.Add(time.Hour), old.Add(time.Hour))

	var order []string
	var mu sync.Mutex
	c := newCollector()
	sink := func(ctx context.Context, evs []Event) error {
		mu.Lock()
		for _, ev := range evs {
			order = append(order, ev.AuditID)
		}
		mu.Unlock()
		return c.sink(ctx, evs)
	}
	cfg := TailConfig{Paths: []string{path}, CheckpointDir: filepath.Join(dir, "cp"), Backlog: true, PollInterval: 5 * time.Millisecond}
	for range 2 { // the second run must add nothing
		tl, err := NewTailer(cfg, zerolog.Nop(), nil)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- tl.Run(ctx, sink) }()
		c.waitFor(t, len(ids))
		time.Sleep(50 * time.Millisecond) // let a wrong re-read show up
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	c.exactlyOnce(t, ids)
	mu.Lock()
	defer mu.Unlock()
	for i, id := range order {
		if id != ids[i] {
			t.Fatalf("event %d is %s, want %s (backlog order)", i, id, ids[i])
		}
	}
}

func mustWrite(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestTailMetrics reads the exposition back through the registry: lag drops
// to zero once the file is read, and skipped records carry their reason.
func TestTailMetrics(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.log")
	mustWrite(t, path, execLine("m-1", 0)+"{\"kind\": 0}\n"+execLine("m-2", 0))
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	tl, err := NewTailer(TailConfig{Paths: []string{path}, PollInterval: 5 * time.Millisecond}, zerolog.Nop(), m)
	if err != nil {
		t.Fatal(err)
	}
	c := newCollector()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- tl.Run(ctx, c.sink) }()
	c.waitFor(t, 2)
	deadline := time.Now().Add(itu.EventuallyBound)
	for testutil.ToFloat64(m.recordsRead.WithLabelValues("file")) != 2 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	want := `
# HELP correlator_audit_tail_lag_bytes Bytes of the audit log file not yet read, by path.
# TYPE correlator_audit_tail_lag_bytes gauge
correlator_audit_tail_lag_bytes{path="` + path + `"} 0
# HELP correlator_audit_records_read_total Audit events decoded, by source kind.
# TYPE correlator_audit_records_read_total counter
correlator_audit_records_read_total{source="file"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "correlator_audit_tail_lag_bytes", "correlator_audit_records_read_total"); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(m.recordsSkipped.WithLabelValues("bad_field_type")); got != 1 {
		t.Fatalf("skipped{bad_field_type} = %v", got)
	}
}
