package auditlog

import (
	"compress/gzip"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"

	"github.com/execid/correlator/internal/testutil"
)

// ctLog is an audit log written the way the apiserver writes it (O_APPEND)
// and rotated the way logrotate's copytruncate does.
type ctLog struct {
	t    *testing.T
	path string
	f    *os.File
	ids  []string
}

func newCTLog(t *testing.T) *ctLog {
	t.Helper()
	path := filepath.Join(t.TempDir(), "audit.log")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return &ctLog{t: t, path: path, f: f}
}

// write appends n exec lines in one write, so no reader sees half of them,
// and returns their IDs.
func (l *ctLog) write(n int) []string {
	l.t.Helper()
	var b strings.Builder
	first := len(l.ids)
	for range n {
		id := fmt.Sprintf("ct-%04d", len(l.ids))
		l.ids = append(l.ids, id)
		b.WriteString(execLine(id, 10))
	}
	if _, err := l.f.WriteString(b.String()); err != nil {
		l.t.Fatal(err)
	}
	return l.ids[first:]
}

// copyTo copies the log to name beside it, as logrotate's copy step does.
func (l *ctLog) copyTo(name string) {
	l.t.Helper()
	b, err := os.ReadFile(l.path)
	if err != nil {
		l.t.Fatal(err)
	}
	mustWrite(l.t, filepath.Join(filepath.Dir(l.path), name), string(b))
}

func (l *ctLog) truncate() {
	l.t.Helper()
	if err := l.f.Truncate(0); err != nil {
		l.t.Fatal(err)
	}
}

// gate is a sink that holds the tailer inside the sink call that delivers
// holdAt, until released: lines written meanwhile have not been read.
type gate struct {
	c       *collector
	holdAt  string
	held    atomic.Bool
	release chan struct{}
	once    sync.Once
}

func newGate(c *collector, holdAt string) *gate {
	return &gate{c: c, holdAt: holdAt, release: make(chan struct{})}
}

func (g *gate) sink(ctx context.Context, evs []Event) error {
	if err := g.c.sink(ctx, evs); err != nil {
		return err
	}
	if g.holdAt != "" && slices.ContainsFunc(evs, func(ev Event) bool { return ev.AuditID == g.holdAt }) && !g.held.Swap(true) {
		select {
		case <-g.release:
		case <-ctx.Done():
		}
	}
	return nil
}

func (g *gate) open() { g.once.Do(func() { close(g.release) }) }

func (c *collector) has(id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.seen[id] > 0
}

// runTailer runs a Tailer with metrics until the test ends.
func runTailer(t *testing.T, cfg TailConfig, m *Metrics, sink Sink) (stop func()) {
	t.Helper()
	cfg.PollInterval = 5 * time.Millisecond
	tl, err := NewTailer(cfg, zerolog.Nop(), m)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- tl.Run(ctx, sink) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("tailer: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func newTestMetrics(t *testing.T) *Metrics {
	t.Helper()
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// copytruncate rotations. Each writes 200 lines and holds the tailer in the
// sink on the last, appends 30 lines nobody has read, rotates, writes after
// the truncation, and releases the tailer.
var copyTruncateCases = []struct {
	name string
	// rotate makes the copy (or not) and truncates.
	rotate func(l *ctLog)
	// after is how many lines are written to the truncated file: 20 stay
	// below the old offset, 400 go past it before the tailer looks again.
	after int
	// gap is the gap reason counted once; "" means none, and every line
	// must arrive exactly once. Otherwise the 30 unread lines are lost.
	gap string
}{
	{"copy .1", func(l *ctLog) { l.copyTo("audit.log.1"); l.truncate() }, 20, ""},
	{"copy .1, regrown past the old offset", func(l *ctLog) { l.copyTo("audit.log.1"); l.truncate() }, 400, ""},
	{"dateext copy beside a newer decoy", func(l *ctLog) {
		// The decoy is long enough and newest, but starts with other bytes:
		// only the fingerprint tells it is not the copy.
		decoy := filepath.Join(filepath.Dir(l.path), "audit.log.2")
		var b strings.Builder
		for i := range 400 {
			b.WriteString(execLine(fmt.Sprintf("decoy-%04d", i), 10))
		}
		mustWrite(l.t, decoy, b.String())
		l.copyTo("audit.log-20260102")
		future := time.Now().Add(time.Hour)
		os.Chtimes(decoy, future, future)
		l.truncate()
	}, 20, ""},
	{"no copy", func(l *ctLog) { l.truncate() }, 20, gapNoCopy},
	{"copy compressed already", func(l *ctLog) {
		b, err := os.ReadFile(l.path)
		if err != nil {
			l.t.Fatal(err)
		}
		var gz strings.Builder
		zw := gzip.NewWriter(&gz)
		zw.Write(b)
		zw.Close()
		mustWrite(l.t, l.path+".1.gz", gz.String())
		l.truncate()
	}, 20, gapNoCopy},
	{"copy ends inside a line", func(l *ctLog) {
		// A line half written when the copy is taken: its rest is
		// truncated away. The 30 whole lines before it are recovered.
		if _, err := l.f.WriteString(execLine("ct-half", 10)[:200]); err != nil {
			l.t.Fatal(err)
		}
		l.copyTo("audit.log.1")
		l.truncate()
	}, 20, gapPartialLine},
}

// TestTailCopyTruncateUnreadLines: lines appended after the tailer's last
// read but before logrotate's copy live on only in the copy; the tailer
// reads them from there, exactly once, and counts what it cannot recover.
func TestTailCopyTruncateUnreadLines(t *testing.T) {
	for _, tc := range copyTruncateCases {
		t.Run(tc.name, func(t *testing.T) {
			l := newCTLog(t)
			m := newTestMetrics(t)
			c := newCollector()
			first := l.write(200)
			g := newGate(c, first[len(first)-1])
			defer g.open()
			runTailer(t, TailConfig{Paths: []string{l.path}, CheckpointDir: filepath.Join(t.TempDir(), "cp")}, m, g.sink)
			testutil.Eventually(t, "the tailer holds the last line written", g.held.Load)

			unread := l.write(30)
			tc.rotate(l)
			after := l.write(tc.after)
			g.open()
			testutil.Eventually(t, "the lines after the truncation arrive", func() bool { return c.has(after[len(after)-1]) })

			checkCopyTruncate(t, m, c, l.ids, unread, tc.gap)
		})
	}
}

// TestTailCopyTruncateWhileStopped: the same rotations while the tailer is
// stopped; the restart finds the truncation from the checkpoint's offset
// and fingerprint.
func TestTailCopyTruncateWhileStopped(t *testing.T) {
	for _, tc := range copyTruncateCases {
		t.Run(tc.name, func(t *testing.T) {
			l := newCTLog(t)
			m := newTestMetrics(t)
			c := newCollector()
			cfg := TailConfig{Paths: []string{l.path}, CheckpointDir: filepath.Join(t.TempDir(), "cp")}
			first := l.write(200)
			stop := runTailer(t, cfg, m, c.sink)
			testutil.Eventually(t, "the first lines arrive", func() bool { return c.has(first[len(first)-1]) })
			stop()

			unread := l.write(30)
			tc.rotate(l)
			after := l.write(tc.after)
			runTailer(t, cfg, m, c.sink)
			testutil.Eventually(t, "the lines after the truncation arrive", func() bool { return c.has(after[len(after)-1]) })

			checkCopyTruncate(t, m, c, l.ids, unread, tc.gap)
		})
	}
}

// checkCopyTruncate: with no gap every line arrived exactly once; with one
// exactly the unread lines are missing and the gap is counted once.
func checkCopyTruncate(t *testing.T, m *Metrics, c *collector, ids, unread []string, gap string) {
	t.Helper()
	want := ids
	if gap != "" && gap != gapPartialLine {
		want = slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return slices.Contains(unread, id) })
	}
	c.exactlyOnce(t, want)
	for _, r := range gapReasons {
		wantN := 0.0
		if r == gap {
			wantN = 1
		}
		if got := promtest.ToFloat64(m.tailGaps.WithLabelValues(r)); got != wantN {
			t.Errorf("correlator_audit_tail_gaps_total{reason=%q} = %v, want %v", r, got, wantN)
		}
	}
}

// TestTailRotatedGoneWhileStopped: the checkpointed file was renamed away
// and compressed while the tailer was stopped; what was appended to it
// after the checkpoint cannot be read, and that gap is counted.
func TestTailRotatedGoneWhileStopped(t *testing.T) {
	l := newCTLog(t)
	m := newTestMetrics(t)
	c := newCollector()
	cfg := TailConfig{Paths: []string{l.path}, CheckpointDir: filepath.Join(t.TempDir(), "cp")}
	first := l.write(10)
	stop := runTailer(t, cfg, m, c.sink)
	testutil.Eventually(t, "the first lines arrive", func() bool { return c.has(first[len(first)-1]) })
	stop()

	unread := l.write(5)
	// Lumberjack's rotation, then its compression: rename, create, gzip,
	// remove. The new file is created while the old one exists, so it
	// cannot reuse its inode.
	rotated := filepath.Join(filepath.Dir(l.path), "audit-2026-01-01T00-00-00.000.log")
	if err := os.Rename(l.path, rotated); err != nil {
		t.Fatal(err)
	}
	l.f.Close()
	var err error
	if l.f, err = os.OpenFile(l.path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(rotated)
	if err != nil {
		t.Fatal(err)
	}
	var gz strings.Builder
	zw := gzip.NewWriter(&gz)
	zw.Write(b)
	zw.Close()
	mustWrite(t, rotated+".gz", gz.String())
	if err := os.Remove(rotated); err != nil {
		t.Fatal(err)
	}
	after := l.write(3)
	runTailer(t, cfg, m, c.sink)
	testutil.Eventually(t, "the new file's lines arrive", func() bool { return c.has(after[len(after)-1]) })
	checkCopyTruncate(t, m, c, l.ids, unread, gapRotatedGone)
}

// TestTailInodeReusedWhileStopped: the file was removed and a new one,
// longer than the checkpoint's offset, created while the tailer was
// stopped. Filesystems often hand the new file the old inode; the
// fingerprint tells it apart, so it is read from its start, not from the
// old offset, and the unread end of the old one is counted as a gap.
func TestTailInodeReusedWhileStopped(t *testing.T) {
	l := newCTLog(t)
	m := newTestMetrics(t)
	c := newCollector()
	cfg := TailConfig{Paths: []string{l.path}, CheckpointDir: filepath.Join(t.TempDir(), "cp")}
	first := l.write(10)
	stop := runTailer(t, cfg, m, c.sink)
	testutil.Eventually(t, "the first lines arrive", func() bool { return c.has(first[len(first)-1]) })
	stop()

	unread := l.write(5)
	l.f.Close()
	if err := os.Remove(l.path); err != nil {
		t.Fatal(err)
	}
	var err error
	if l.f, err = os.OpenFile(l.path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600); err != nil {
		t.Fatal(err)
	}
	after := l.write(100)
	runTailer(t, cfg, m, c.sink)
	testutil.Eventually(t, "the new file's lines arrive", func() bool { return c.has(after[len(after)-1]) })
	want := slices.DeleteFunc(slices.Clone(l.ids), func(id string) bool { return slices.Contains(unread, id) })
	c.exactlyOnce(t, want)
	gaps := 0.0
	for _, r := range gapReasons {
		gaps += promtest.ToFloat64(m.tailGaps.WithLabelValues(r))
	}
	if gaps != 1 {
		t.Errorf("%v gaps counted, want 1", gaps)
	}
}
