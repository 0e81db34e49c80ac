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
	rows, err := s.r.QueryContext(ctx, `SELECT k, count(*), (SELECT count(*) FROM sessions s
		WHERE s.audit_id = 'batch-' || k) FROM (SELECT coalesce(detail ->> 'pid', 0) AS k FROM processes) GROUP BY k`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	batches := map[int]bool{}
	for rows.Next() {
		var k, n, sessions int
		if err := rows.Scan(&k, &n, &sessions); err != nil {
			t.Fatal(err)
		}
		if n != crashRows || sessions != 1 {
			t.Errorf("batch %d is torn: %d of %d processes, %d sessions", k, n, crashRows, sessions)
		}
		batches[k] = true
	}
	var sessions int
	s.r.QueryRow("SELECT count(*) FROM sessions").Scan(&sessions)
	if sessions != len(batches) {
		t.Errorf("%d sessions for %d batches", sessions, len(batches))
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
	s.r.QueryRow("SELECT coalesce(max(pid) + 1, 0) FROM processes").Scan(&next)
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
		}
		if err := w.Add(context.Background(), store.Batch{Sessions: []join.Session{ss}, Processes: procs}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
	}
	os.Exit(3)
}
