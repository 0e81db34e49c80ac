package sqlite

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/execid/correlator/internal/testutil"
	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/store"
	"github.com/execid/correlator/pkg/vocab"
)

const (
	crashChildEnv = "STORE_CRASH_CHILD" // the database path, in the child
	crashRows     = 300                 // processes per batch
)

// TestCrashSafety re-executes the test binary as a child that writes
// numbered batches through a Writer, and SIGKILLs it mid-stream, several
// times over the same file. After each kill the file must pass
// integrity_check, every batch must be wholly present or wholly absent,
// and every batch the child saw committed must be there.
func TestCrashSafety(t *testing.T) {
	if path := os.Getenv(crashChildEnv); path != "" {
		crashChild(path)
		return
	}
	path := filepath.Join(t.TempDir(), "crash.db")
	rng := rand.New(rand.NewPCG(7, 7))
	for round := range 4 {
		cmd := exec.Command(os.Args[0], "-test.run=^TestCrashSafety$", "-test.count=1")
		cmd.Env = append(os.Environ(), crashChildEnv+"="+path)
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Wait for a few commits, then kill at a random moment.
		sc := bufio.NewScanner(out)
		lastCommitted, commits := -1, 0
		for commits < 3+rng.IntN(5) && sc.Scan() {
			if k, ok := strings.CutPrefix(sc.Text(), "committed "); ok {
				lastCommitted, _ = strconv.Atoi(k)
				commits++
			}
		}
		time.Sleep(time.Duration(rng.IntN(30)) * time.Millisecond)
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		for sc.Scan() { // commits reported before the kill landed
			if k, ok := strings.CutPrefix(sc.Text(), "committed "); ok {
				lastCommitted, _ = strconv.Atoi(k)
			}
		}
		cmd.Wait()
		if lastCommitted < 0 {
			t.Fatalf("round %d: the child committed nothing", round)
		}
		batches := checkCrashFile(t, path, lastCommitted)
		t.Logf("round %d: killed after batch %d committed; %d whole batches stored", round, lastCommitted, batches)
	}
}

// checkCrashFile verifies the file and returns how many batches it holds.
func checkCrashFile(t *testing.T, path string, lastCommitted int) int {
	t.Helper()
	s, err := Open(path, Config{}, zerolog.Nop())
	if err != nil {
		t.Fatalf("reopening after SIGKILL: %v", err)
	}
	defer s.Close()
	ctx := context.Background()
	if res, err := s.IntegrityCheck(ctx); err != nil || res != "ok" {
		t.Fatalf("integrity_check = %q, %v", res, err)
	}
	// Read as a responder would: every stored session holds its whole
	// batch, half of it in runs (exited), half in rows (running).
	batches := map[int]bool{}
	var procs int
	for _, ss := range allSessions(t, s, store.SessionFilter{}) {
		k, err := strconv.Atoi(strings.TrimPrefix(ss.AuditID, "batch-"))
		if err != nil {
			t.Fatalf("session %s is no batch's", ss.AuditID)
		}
		d, err := s.GetSession(ctx, ss.AuditID)
		if err != nil {
			t.Fatal(err)
		}
		exited := 0
		for _, p := range d.Processes {
			if !p.Exit.IsZero() {
				exited++
			}
		}
		if len(d.Processes) != crashRows || exited != crashRows/2 || ss.ProcessCount != crashRows {
			t.Errorf("batch %d is torn: %d of %d processes (%d exited, count %d)", k, len(d.Processes), crashRows,
				exited, ss.ProcessCount)
		}
		batches[k] = true
		procs += len(d.Processes)
	}
	if all := len(allProcesses(t, s, store.ProcessFilter{})); all != procs {
		t.Errorf("%d processes listed, %d in the batches' sessions", all, procs)
	}
	var runs int
	if err := s.r.QueryRow("SELECT count(*) FROM process_runs").Scan(&runs); err != nil || len(batches) > 0 && runs == 0 {
		t.Errorf("%d runs stored (%v): the exited processes are not in runs", runs, err)
	}
	for k := 0; k <= lastCommitted; k++ {
		if !batches[k] {
			t.Errorf("batch %d was reported committed but is missing", k)
		}
	}
	return len(batches)
}

// crashChild writes batches forever, continuing the numbering in the file,
// and prints "committed K" after each commit that holds batch K last.
func crashChild(path string) {
	s, err := Open(path, Config{}, zerolog.Nop())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	next := 0
	var stored int
	var last int64 // session(k) is received k minutes after base
	if err := s.r.QueryRow("SELECT count(*), coalesce(max(request_received), 0) FROM sessions").Scan(&stored, &last); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if stored > 0 {
		next = int(time.Duration(last-base.UnixNano())/time.Minute) + 1
	}
	w := store.NewWriter(s, 2*crashRows, 2*time.Millisecond, store.WithCommitHook(func(b store.Batch, err error) {
		if err == nil && len(b.Sessions) > 0 {
			fmt.Printf("committed %s\n", strings.TrimPrefix(b.Sessions[len(b.Sessions)-1].AuditID, "batch-"))
		}
	}))
	deadline := time.Now().Add(testutil.EventuallyBound) // a hang guard: the parent kills long before
	for k := next; time.Now().Before(deadline); k++ {
		ss := session(fmt.Sprintf("batch-%d", k), "crash", k)
		procs := make([]join.Process, crashRows)
		for i := range procs {
			procs[i] = process(fmt.Sprintf("b%d-%d", k, i), ss.AuditID, i)
			procs[i].PID, procs[i].PPID = uint32(k), uint32(i)
			if i%2 == 0 { // settled: stored in a run
				procs[i].Attribution, procs[i].Exit, procs[i].ExitCode = vocab.AttributionInherited, procs[i].Start.Add(time.Second), ptr(0)
			}
		}
		if err := w.Add(context.Background(), store.Batch{Sessions: []join.Session{ss}, Processes: procs}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
	}
	os.Exit(3)
}
