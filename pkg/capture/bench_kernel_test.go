package capture

import (
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
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

// tinyBinary builds the smallest static program (exit(0), no libc): the
// burst benchmark wants execs as fast as the kernel can make them.
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

// overheadTarget is what the overhead benchmark execs: a dynamically
// linked /bin/true, as a real workload starts (CORRELATOR_BENCH_TARGET
// overrides it).
func overheadTarget(b *testing.B) string {
	b.Helper()
	target := "/bin/true"
	if t := os.Getenv("CORRELATOR_BENCH_TARGET"); t != "" {
		return t
	}
	f, err := elf.Open(target)
	if err != nil {
		b.Fatalf("opening %s: %v", target, err)
	}
	defer f.Close()
	if f.Section(".interp") == nil {
		b.Fatalf("%s is statically linked; the benchmark wants a dynamically linked one", target)
	}
	return target
}

// frameSizes counts the raw frames a consumer read, by kind.
type frameSizes struct {
	n, bytes [3]atomic.Int64 // index: event kind (1 exec, 2 exit)
}

func (f *frameSizes) add(kind Kind, n int) {
	i := 1
	if kind == KindExit {
		i = 2
	}
	f.n[i].Add(1)
	f.bytes[i].Add(int64(n))
}

// mean is the average frame of a kind, in bytes.
func (f *frameSizes) mean(i int) float64 {
	if n := f.n[i].Load(); n > 0 {
		return float64(f.bytes[i].Load()) / float64(n)
	}
	return 0
}

// ringSlot is what one frame of n bytes takes in the ring: the kernel's
// 8-byte record header, rounded up to 8.
func ringSlot(n float64) float64 { return float64((int(n) + 8 + 7) &^ 7) }

// benchProbe loads a probe (not attached) with a consumer that decodes and
// discards, as the agent would, and counts what it read.
func benchProbe(b *testing.B) (*Probe, *atomic.Int64, *frameSizes) {
	b.Helper()
	testutil.RequireRoot(b)
	cfg := Default()
	cfg.PinPath = ""
	p, err := Load(cfg, zerolog.Nop())
	if err != nil {
		b.Fatal(err)
	}
	var n atomic.Int64
	sizes := &frameSizes{}
	waiter, err := newRingWaiter(p.objs.Events)
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			_, err := p.ring.read(maxBurst, func(frame []byte) {
				if ev, err := p.dec.Decode(frame); err == nil {
					n.Add(1)
					sizes.add(ev.Kind, len(frame))
				}
			})
			if err != nil && !errors.Is(err, errRingBusy) {
				return
			}
			if waiter.wait(cfg.FlushInterval) != nil {
				return
			}
		}
	}()
	b.Cleanup(func() { waiter.Close(); <-done; p.Close() })
	return p, &n, sizes
}

func forkExecWait(b *testing.B, argv, env []string) {
	pid, err := syscall.ForkExec(argv[0], argv, &syscall.ProcAttr{Env: env})
	if err != nil {
		b.Error(err)
		return
	}
	var ws syscall.WaitStatus
	for {
		_, err := syscall.Wait4(pid, &ws, 0, nil)
		if err != syscall.EINTR {
			if err != nil {
				b.Error(err)
			}
			return
		}
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
func progStats(progs [3]*ebpf.Program) ([3]ebpf.ProgramStats, error) {
	var out [3]ebpf.ProgramStats
	for i, prog := range progs {
		if prog == nil {
			continue
		}
		s, err := prog.Stats()
		if err != nil {
			return out, fmt.Errorf("reading program stats: %w", err)
		}
		out[i] = *s
	}
	return out, nil
}

// overheadSide is what BenchmarkExecOverhead attaches and detaches: the
// probes of this process, or a whole `correlator run` agent.
type overheadSide interface {
	attach(b *testing.B) [3]*ebpf.Program // exec, fork, exit
	detach(b *testing.B)
}

type probeSide struct{ p *Probe }

func (s probeSide) attach(b *testing.B) [3]*ebpf.Program {
	if err := s.p.Attach(); err != nil {
		b.Fatal(err)
	}
	return [3]*ebpf.Program{s.p.objs.HandleExec, s.p.objs.HandleFork, s.p.objs.HandleExit}
}

func (s probeSide) detach(b *testing.B) {
	if err := s.p.Detach(); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkExecOverhead measures vfork+exec+wait of a dynamically linked
// /bin/true with the probes detached and attached, interleaved in batches
// within one run so drift hits both alike. The key sits last, behind the
// baseline. One op is one exec in each mode; the ratio is attached/detached.
//
// With CORRELATOR_BENCH_AGENT=path/to/correlator the attached side is a
// whole `correlator run` (temporary SQLite store, no audit source) started
// for each batch and stopped after it, so decoding, joining and storing
// every event compete with the execs as they do on a node.
func BenchmarkExecOverhead(b *testing.B) {
	testutil.RequireRoot(b)
	target, driver := overheadTarget(b), execBench(b)
	var side overheadSide
	batch := 200
	if bin := os.Getenv("CORRELATOR_BENCH_AGENT"); bin != "" {
		side = newAgentSide(b, bin)
		batch = 1000 // a start costs about a second: amortise it
	} else {
		p, _, _ := benchProbe(b)
		side = probeSide{p}
	}
	overheadRounds(b, side, batch, func(n, size int) time.Duration { return timeExecs(b, driver, target, n, size) })
}

// overheadRounds alternates rounds of n execs with side detached and
// attached, timed by run, for each environment size; it reports both
// times, their ratio, the median of the rounds' ratios, and the BPF time
// per hook.
func overheadRounds(b *testing.B, side overheadSide, batch int, run func(n, envBytes int) time.Duration) {
	// The kernel's own accounting of time spent in our programs.
	stats, err := ebpf.EnableStats(unix.BPF_STATS_RUN_TIME)
	if err != nil {
		b.Fatalf("enabling BPF run-time stats: %v", err)
	}
	defer stats.Close()
	for _, size := range []int{4 << 10, 64 << 10, 256 << 10} {
		b.Run(fmt.Sprintf("env=%dKiB", size>>10), func(b *testing.B) {
			var off, on time.Duration
			var runs, runtime [3]uint64
			var ratios []float64
			for i := 0; i < b.N; i += batch {
				n := min(batch, b.N-i)
				d := run(n, size)
				off += d
				progs := side.attach(b)
				before, err := progStats(progs)
				if err != nil {
					b.Fatal(err)
				}
				a := run(n, size)
				on += a
				ratios = append(ratios, float64(a)/float64(d))
				after, err := progStats(progs)
				if err != nil {
					b.Fatal(err)
				}
				side.detach(b)
				for k := range runs {
					runs[k] += after[k].RunCount - before[k].RunCount
					runtime[k] += uint64(after[k].Runtime - before[k].Runtime)
				}
			}
			b.ReportMetric(float64(off.Nanoseconds())/float64(b.N), "ns/exec-detached")
			b.ReportMetric(float64(on.Nanoseconds())/float64(b.N), "ns/exec-attached")
			b.ReportMetric(float64(on)/float64(off), "ratio")
			// The machine is shared: the median batch shrugs off a noisy one.
			slices.Sort(ratios)
			b.ReportMetric(ratios[len(ratios)/2], "median-ratio")
			for k, unit := range []string{"bpf-ns/exec", "bpf-ns/fork", "bpf-ns/exit"} {
				if runs[k] > 0 {
					b.ReportMetric(float64(runtime[k])/float64(runs[k]), unit)
				}
			}
		})
	}
}

// BenchmarkExecBurst runs 50,000 execs as fast as eight workers can and
// reports how many events the kernel could not queue, and the size of the
// frames that carried them: the ring's capacity in exec events follows.
func BenchmarkExecBurst(b *testing.B) {
	const burst, workers = 50000, 8
	bin := tinyBinary(b)
	p, received, sizes := benchProbe(b)
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
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := 0; j < burst/workers; j++ {
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
	// Every exec and exit of the burst that the kernel queued reaches the
	// consumer (other processes' events only add to the count).
	drops := after.RingbufDrops - before.RingbufDrops
	want := uint64(2*burst*b.N) - min(drops, uint64(2*burst*b.N))
	testutil.Eventually(b, "the burst's queued events delivered", func() bool {
		return uint64(received.Load()-start) >= want
	})
	b.ReportMetric(float64(after.RingbufDrops-before.RingbufDrops)/float64(b.N), "drops/burst")
	b.ReportMetric(float64(received.Load()-start)/float64(b.N), "events/burst")
	b.ReportMetric(float64(burst*b.N)/b.Elapsed().Seconds(), "execs/s")
	execB, exitB := sizes.mean(1), sizes.mean(2)
	b.ReportMetric(execB, "B/exec-frame")
	b.ReportMetric(exitB, "B/exit-frame")
	ring := float64(p.cfg.RingBufferBytes)
	b.ReportMetric(ring/ringSlot(execB), "ring-cap-execs")
	b.ReportMetric(ring/(ringSlot(execB)+ringSlot(exitB)), "ring-cap-exec+exit")
}
