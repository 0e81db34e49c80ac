package capture

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/execid/correlator/internal/testutil"
)

// tinyBinary builds the smallest static program (exit(0), no libc) so the
// benchmark measures exec itself, not a program's startup.
func tinyBinary(b *testing.B) string {
	b.Helper()
	dir := b.TempDir()
	src := filepath.Join(dir, "tiny.c")
	bin := filepath.Join(dir, "tiny")
	code := "void _start(void){__asm__ volatile(\"mov $60,%eax\\nxor %edi,%edi\\nsyscall\");}\n"
	if runtime.GOARCH == "amd64" {
		if err := os.WriteFile(src, []byte(code), 0o644); err == nil {
			if out, err := exec.Command("gcc", "-static", "-nostdlib", "-O2", "-o", bin, src).CombinedOutput(); err == nil {
				return bin
			} else {
				b.Logf("gcc unavailable (%v: %s); using busybox true", err, out)
			}
		}
	}
	return "/bin/busybox"
}

// benchProbe loads and attaches a probe with a consumer that decodes and
// discards, as the agent would.
func benchProbe(b *testing.B) (*Probe, *atomic.Int64) {
	b.Helper()
	testutil.RequireRoot(b)
	cfg := Default()
	cfg.PinPath = ""
	p, err := Load(cfg, zerolog.Nop())
	if err != nil {
		b.Fatal(err)
	}
	var n atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = p.Run(ctx, func(Event) { n.Add(1) }, nil)
	}()
	b.Cleanup(func() { cancel(); <-done; p.Close() })
	return p, &n
}

func forkExecWait(b *testing.B, argv, env []string) {
	pid, err := syscall.ForkExec(argv[0], argv, &syscall.ProcAttr{Env: env})
	if err != nil {
		b.Fatal(err)
	}
	var ws syscall.WaitStatus
	if _, err := syscall.Wait4(pid, &ws, 0, nil); err != nil {
		b.Fatal(err)
	}
}

// execBench builds testdata/bench/execbench.c, the C loop that times execs.
func execBench(b *testing.B) string {
	b.Helper()
	bin := filepath.Join(b.TempDir(), "execbench")
	if out, err := exec.Command("gcc", "-O2", "-o", bin, "testdata/bench/execbench.c").CombinedOutput(); err != nil {
		b.Fatalf("building execbench (gcc is required for exec benchmarks): %v: %s", err, out)
	}
	return bin
}

// timeExecs runs n execs through execbench and returns their total time.
func timeExecs(b *testing.B, driver, target string, n, envBytes int) time.Duration {
	out, err := exec.Command(driver, strconv.Itoa(n), strconv.Itoa(envBytes), target).Output()
	if err != nil {
		b.Fatalf("running execbench: %v", err)
	}
	ns, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
	if err != nil {
		b.Fatalf("parsing execbench output %q: %v", out, err)
	}
	return time.Duration(ns)
}

// progStats reads the kernel's run-time accounting of exec, fork and exit.
func progStats(p *Probe) ([3]ebpf.ProgramStats, error) {
	var out [3]ebpf.ProgramStats
	for i, prog := range []*ebpf.Program{p.objs.HandleExec, p.objs.HandleFork, p.objs.HandleExit} {
		s, err := prog.Stats()
		if err != nil {
			return out, fmt.Errorf("reading program stats: %w", err)
		}
		out[i] = *s
	}
	return out, nil
}

// BenchmarkExecOverhead measures vfork+exec+wait of a tiny static binary
// with the probes detached and attached, interleaved in batches within one
// run so drift hits both alike. The key sits last, behind the baseline.
// One op is one exec in each mode; the ratio is attached/detached.
func BenchmarkExecOverhead(b *testing.B) {
	target, driver := tinyBinary(b), execBench(b)
	p, _ := benchProbe(b)
	// The kernel's own accounting of time spent in our exec program.
	stats, err := ebpf.EnableStats(unix.BPF_STATS_RUN_TIME)
	if err != nil {
		b.Fatalf("enabling BPF run-time stats: %v", err)
	}
	defer stats.Close()
	for _, size := range []int{4 << 10, 64 << 10, 256 << 10} {
		b.Run(fmt.Sprintf("env=%dKiB", size>>10), func(b *testing.B) {
			const batch = 100
			var off, on time.Duration
			before, err := progStats(p)
			if err != nil {
				b.Fatal(err)
			}
			for i := 0; i < b.N; i += batch {
				n := min(batch, b.N-i)
				if err := p.Detach(); err != nil {
					b.Fatal(err)
				}
				off += timeExecs(b, driver, target, n, size)
				if err := p.Attach(); err != nil {
					b.Fatal(err)
				}
				on += timeExecs(b, driver, target, n, size)
			}
			b.ReportMetric(float64(off.Nanoseconds())/float64(b.N), "ns/exec-detached")
			b.ReportMetric(float64(on.Nanoseconds())/float64(b.N), "ns/exec-attached")
			b.ReportMetric(float64(on)/float64(off), "ratio")
			after, err := progStats(p)
			if err != nil {
				b.Fatal(err)
			}
			for i, unit := range []string{"bpf-ns/exec", "bpf-ns/fork", "bpf-ns/exit"} {
				if runs := after[i].RunCount - before[i].RunCount; runs > 0 {
					b.ReportMetric(float64(after[i].Runtime-before[i].Runtime)/float64(runs), unit)
				}
			}
		})
	}
}

// BenchmarkExecBurst runs 20,000 execs as fast as two workers can and
// reports how many events the kernel could not queue.
func BenchmarkExecBurst(b *testing.B) {
	const burst = 20000
	bin := tinyBinary(b)
	p, received := benchProbe(b)
	if err := p.Attach(); err != nil {
		b.Fatal(err)
	}
	env := append(bigEnv(4<<10), keyEnv(testutil.RandomUUID()))
	before, err := p.Stats()
	if err != nil {
		b.Fatal(err)
	}
	start := received.Load()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		var wg sync.WaitGroup
		for w := 0; w < 2; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := 0; j < burst/2; j++ {
					forkExecWait(b, []string{bin, "true"}, env)
				}
			}()
		}
		wg.Wait()
	}
	b.StopTimer()
	after, err := p.Stats()
	if err != nil {
		b.Fatal(err)
	}
	// Let the consumer drain before counting what arrived.
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline) && p.Backlog() > 0; {
		time.Sleep(10 * time.Millisecond)
	}
	b.ReportMetric(float64(after.RingbufDrops-before.RingbufDrops)/float64(b.N), "drops/burst")
	b.ReportMetric(float64(received.Load()-start)/float64(b.N), "events/burst")
	b.ReportMetric(float64(burst*b.N)/b.Elapsed().Seconds(), "execs/s")
}
