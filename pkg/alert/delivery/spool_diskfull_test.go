//go:build linux

package delivery

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/execid/correlator/internal/testutil"
	"github.com/execid/correlator/pkg/store"
)

// smallFS mounts a tmpfs of size on a fresh directory: a disk that fills.
func smallFS(t *testing.T, size string) string {
	t.Helper()
	testutil.RequireRoot(t)
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size="+size); err != nil {
		t.Fatalf("mounting a %s tmpfs on %s: %v", size, dir, err)
	}
	// Detached, so a test that failed with files open still unmounts.
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	return dir
}

func freeSpace(t *testing.T, dir string) int64 {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Bavail) * int64(st.Bsize)
}

// memSink records every alert ID it accepts, with how often; while down it
// refuses every batch.
type memSink struct {
	mu   sync.Mutex
	down bool
	ids  map[string]int
}

func (m *memSink) Name() string { return "mem" }
func (m *memSink) Close() error { return nil }

func (m *memSink) Deliver(_ context.Context, alerts []store.Alert) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.down {
		return errors.New("sink down")
	}
	if m.ids == nil {
		m.ids = map[string]int{}
	}
	for _, a := range alerts {
		m.ids[a.ID]++
	}
	return nil
}

func (m *memSink) setDown(down bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.down = down
}

// missing returns how many of ids the sink has not received.
func (m *memSink) missing(ids []string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, id := range ids {
		if m.ids[id] == 0 {
			n++
		}
	}
	return n
}

// runningDispatcher is a Dispatcher with Run going; stop ends Run and
// closes it.
type runningDispatcher struct {
	*Dispatcher
	cancel context.CancelFunc
	done   chan struct{}
}

func (r *runningDispatcher) stop(t *testing.T) {
	t.Helper()
	r.cancel()
	<-r.done
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestDispatcherDiskFull: a sink is down while its spool fills a 256 KiB
// filesystem. Each alert that no longer fits is counted as
// dropped{reason="disk_full"} and logged; when the sink is back, the spooled
// alerts are delivered, their space is freed so new alerts spool again, and
// a restart sends none of them a second time. With the default bound one
// segment fills the disk; with 1 MiB, segments of 128 KiB do.
func TestDispatcherDiskFull(t *testing.T) {
	testutil.RequireRoot(t)
	for _, maxBytes := range []int64{0, 1 << 20} {
		t.Run(fmt.Sprintf("SpoolMaxBytes=%d", maxBytes), func(t *testing.T) { testDispatcherDiskFull(t, maxBytes) })
	}
}

func testDispatcherDiskFull(t *testing.T, maxBytes int64) {
	dir := smallFS(t, "256k")
	empty := freeSpace(t, dir)
	sink := &memSink{down: true}
	logs := &testutil.SyncBuffer{}
	open := func() *runningDispatcher {
		d, err := NewDispatcher(DispatcherConfig{SpoolDir: dir, SpoolMaxBytes: maxBytes, InitialBackoff: 5 * time.Millisecond,
			MaxBackoff: 20 * time.Millisecond}, []Deliverer{sink}, zerolog.New(logs), prometheus.NewRegistry())
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		r := &runningDispatcher{Dispatcher: d, cancel: cancel, done: make(chan struct{})}
		go func() { d.Run(ctx); close(r.done) }()
		return r
	}
	d := open()
	ctx := context.Background()
	var spooled, lost []string
	next := 0
	submit := func() error {
		a := mkAlerts(next, 1)
		next++
		err := d.Submit(ctx, a)
		if err == nil {
			spooled = append(spooled, a[0].ID)
		} else {
			lost = append(lost, a[0].ID)
		}
		return err
	}
	// One alert per Submit until the disk is full, then a few more.
	var err error
	for err == nil {
		if err = submit(); next > 5000 {
			t.Fatal("5000 alerts spooled on a 256 KiB filesystem")
		}
	}
	for range 4 {
		if err = submit(); err == nil {
			t.Fatal("an alert spooled on a full filesystem")
		}
	}
	if !errors.Is(err, ErrDiskFull) {
		t.Errorf("Submit on a full disk: %v, want ErrDiskFull", err)
	}
	t.Logf("spooled %d alerts, %d bytes free of %d", len(spooled), freeSpace(t, dir), empty)
	if got := promtest.ToFloat64(d.m.dropped.WithLabelValues("mem", "disk_full")); int(got) != len(lost) {
		t.Errorf("dropped{reason=disk_full} %v, want %d", got, len(lost))
	}
	if !strings.Contains(logs.String(), `"reason":"disk_full"`) {
		t.Errorf("no disk_full drop logged; logs:\n%s", logs)
	}

	sink.setDown(false)
	testutil.Eventually(t, "every spooled alert is delivered", func() bool { return sink.missing(spooled) == 0 })
	// Delivered alerts give their space back (a cursor and a segment header
	// may remain: a few pages).
	testutil.Eventually(t, "the spool's space is freed", func() bool { return freeSpace(t, dir) >= empty-16<<10 })
	for range 20 {
		if err := submit(); err != nil {
			t.Fatalf("spooling after delivery: %v", err)
		}
	}
	testutil.Eventually(t, "the new alerts are delivered", func() bool { return sink.missing(spooled) == 0 })

	// A restart sends nothing that was delivered.
	d.stop(t)
	d = open()
	for range 5 {
		if err := submit(); err != nil {
			t.Fatalf("spooling after the restart: %v", err)
		}
	}
	testutil.Eventually(t, "alerts after the restart are delivered", func() bool { return sink.missing(spooled) == 0 })
	d.stop(t)

	sink.mu.Lock()
	defer sink.mu.Unlock()
	for id, n := range sink.ids {
		if n != 1 {
			t.Errorf("alert %s delivered %d times", id, n)
		}
	}
	for _, id := range lost {
		if sink.ids[id] != 0 {
			t.Errorf("alert %s delivered although spooling it failed", id)
		}
	}
	if len(sink.ids) != len(spooled) {
		t.Errorf("%d distinct alerts delivered, %d spooled", len(sink.ids), len(spooled))
	}
}

// TestSpoolDiskFullRestart: a spool filled its filesystem; half of it is
// delivered and the process restarts while the disk is still full. The
// restart delivers exactly the other half: the read position was saved
// although the disk was full.
func TestSpoolDiskFullRestart(t *testing.T) {
	dir := smallFS(t, "256k")
	ev := &countingEvents{}
	lim := spoolLimits{maxBytes: 1 << 30, maxEntries: 1 << 20, minFree: 64 << 10}
	s, err := openSpool(dir, lim, ev)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for ; appendErr(s, rec(n)) == nil; n++ {
		if n > 20000 {
			t.Fatal("20000 records spooled on a 256 KiB filesystem")
		}
	}
	recs, next, err := s.peek(n/2, 1<<30)
	if err != nil || len(recs) != n/2 {
		t.Fatalf("peeked %d of %d: %v", len(recs), n/2, err)
	}
	if err := s.ack(next, len(recs)); err != nil {
		t.Fatalf("acking on a full disk: %v", err)
	}
	if err := s.close(); err != nil {
		t.Fatal(err)
	}
	if s, err = openSpool(dir, lim, ev); err != nil {
		t.Fatal(err)
	}
	defer s.close()
	got := drain(t, s, 100)
	var want []string
	for i := n / 2; i < n; i++ {
		want = append(want, string(rec(i)))
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("after the restart got %d records (first %q), want the %d undelivered ones", len(got), first(got), len(want))
	}
	if ev.drops["disk_full"] != 1 {
		t.Errorf("disk_full drops %d, want 1; all drops %v", ev.drops["disk_full"], ev.drops)
	}
}

func appendErr(s *spool, r []byte) error {
	_, _, err := s.append([][]byte{r})
	return err
}

func first(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}

// TestSpoolNoSpace: with no reserve the write itself fails with ENOSPC.
// The alerts it held are counted as disk_full and leave no torn record;
// delivering everything frees the space (a single segment filled the disk)
// and the next append works.
func TestSpoolNoSpace(t *testing.T) {
	dir := smallFS(t, "128k")
	empty := freeSpace(t, dir)
	ev := &countingEvents{}
	lim := spoolLimits{maxBytes: 1 << 30, maxEntries: 1 << 20}
	s, err := openSpool(dir, lim, ev)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for ; err == nil; n++ {
		if _, _, err = s.append([][]byte{rec(n), rec(n + 1<<20)}); n > 20000 {
			t.Fatal("20000 records spooled on a 128 KiB filesystem")
		}
	}
	n-- // the last call spooled nothing
	if !errors.Is(err, ErrDiskFull) || !errors.Is(err, unix.ENOSPC) {
		t.Errorf("append on a full disk: %v, want ErrDiskFull wrapping ENOSPC", err)
	}
	if ev.drops["disk_full"] != 2 {
		t.Errorf("disk_full drops %d, want 2", ev.drops["disk_full"])
	}
	if s.depth() != 2*n {
		t.Errorf("depth %d, want %d", s.depth(), 2*n)
	}
	recs, next, err := s.peek(1<<30, 1<<30)
	if err != nil || len(recs) != 2*n {
		t.Fatalf("peeked %d of %d: %v", len(recs), 2*n, err)
	}
	if err := s.ack(next, len(recs)); err != nil {
		t.Fatalf("acking everything on a full disk: %v", err)
	}
	if free := freeSpace(t, dir); free < empty-8<<10 {
		t.Errorf("%d bytes free after delivering everything, %d when empty", free, empty)
	}
	if _, _, err := s.append([][]byte{rec(-1)}); err != nil {
		t.Fatalf("appending after delivery: %v", err)
	}
	s.close()
	if s, err = openSpool(dir, lim, ev); err != nil {
		t.Fatal(err)
	}
	defer s.close()
	if got := drain(t, s, 10); fmt.Sprint(got) != fmt.Sprint([]string{string(rec(-1))}) {
		t.Errorf("after a restart got %v, want only the record appended after delivery", got)
	}
}

// TestCursorWriteOnFullDisk: replacing the cursor on a full disk fails and
// leaves the old position readable, with no temporary file behind.
func TestCursorWriteOnFullDisk(t *testing.T) {
	dir := smallFS(t, "64k")
	if err := writeCursor(dir, pos{3, 100}); err != nil {
		t.Fatal(err)
	}
	fill := filepath.Join(dir, "fill")
	f, err := os.Create(fill)
	if err != nil {
		t.Fatal(err)
	}
	for err == nil {
		_, err = f.Write(make([]byte, 4096))
	}
	f.Close()
	err = writeCursor(dir, pos{4, 200})
	if !errors.Is(err, ErrDiskFull) {
		t.Errorf("writing the cursor on a full disk: %v, want ErrDiskFull", err)
	}
	if p, err := readCursor(dir); err != nil || p != (pos{3, 100}) {
		t.Errorf("cursor after the failed write %v, %v; want {3 100}", p, err)
	}
	if _, err := os.Stat(filepath.Join(dir, cursorFile+".tmp")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("temporary cursor left behind: %v", err)
	}
	// Positive control: with space again the write goes through.
	os.Remove(fill)
	if err := writeCursor(dir, pos{4, 200}); err != nil {
		t.Fatal(err)
	}
	if p, err := readCursor(dir); err != nil || p != (pos{4, 200}) {
		t.Errorf("cursor %v, %v; want {4 200}", p, err)
	}
}
