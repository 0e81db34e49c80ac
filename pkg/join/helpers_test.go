package join

import (
	"fmt"
	"math/rand"
	"os"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/execid/correlator/pkg/auditlog"
	"github.com/execid/correlator/pkg/capture"
	"github.com/execid/correlator/pkg/vocab"
	"github.com/rs/zerolog"
)

var t0 = time.Date(2026, 3, 4, 10, 0, 0, 0, time.UTC)

const (
	idA = "0b5e1c8a-0000-4000-8000-00000000000a"
	idB = "0b5e1c8a-0000-4000-8000-00000000000b"
	idC = "0b5e1c8a-0000-4000-8000-00000000000c"
)

func newJoiner(tb testing.TB, mods ...func(*Config)) *Joiner {
	tb.Helper()
	cfg := DefaultConfig()
	for _, m := range mods {
		m(&cfg)
	}
	j, err := New(cfg, zerolog.Nop())
	if err != nil {
		tb.Fatalf("creating joiner: %v", err)
	}
	return j
}

// noLateWindow forgets exited processes at the pending TTL, as before
// Config.LateWindow: for tests of what leaving memory does.
func noLateWindow(c *Config) { c.LateWindow = 0 }

// pr builds a process in ns/web, container app, started 1 s after t0.
func pr(id, parent, auditID string, source vocab.Source, flags ...string) Process {
	return Process{Exec: capture.Exec{ProcessID: id, ParentProcessID: parent, PID: 100, PPID: 99,

		Filename: "/bin/sh", Argv: []string{"sh"},
		ContainerID: "ctr-app", PodUID: "uid-web"}, Captured: capture.KeyValue{Value: auditID, Source: source, Flags: flags}, Start: t0.Add(time.Second), ExecTime: t0.Add(time.Second),

		Namespace: "ns", Pod: "web", Container: "app",
	}
}

// xr builds a complete, allowed exec record for ns/web/app.
func xr(id string, command ...string) auditlog.ExecRecord {
	if len(command) == 0 {
		command = []string{"sh"}
	}
	return auditlog.ExecRecord{
		AuditID: id, Verb: "create", Subresource: auditlog.SubresourceExec,
		Stages:    []string{auditlog.StageRequestReceived, auditlog.StageResponseStarted, auditlog.StageResponseComplete},
		User:      auditlog.UserInfo{Username: "alice", Groups: []string{"dev"}},
		Namespace: "ns", Pod: "web", Container: "app", Command: command,
		Code: 101, Decision: "allow",
		RequestURI:               "/api/v1/namespaces/ns/pods/web/exec?" + id,
		RequestReceivedTimestamp: t0, EndTimestamp: t0.Add(time.Minute),
	}
}

// snapshot folds a stream of updates into the last state of every row.
// It also checks every ExitOnly update against the row it follows: the
// row before, with the new exit, must be the new row (badExitOnly lists
// those that were not).
type snapshot struct {
	procs       map[string]Process
	sessions    map[string]Session
	exitOnly    int      // ExitOnly updates applied
	badExitOnly []string // ExitOnly updates that changed more than the exit
}

func newSnapshot() *snapshot {
	return &snapshot{procs: map[string]Process{}, sessions: map[string]Session{}}
}

func (s *snapshot) apply(us []Update) {
	for _, u := range us {
		switch {
		case u.Process != nil:
			if u.ExitOnly {
				s.checkExitOnly(u.Process)
			}
			s.procs[u.Process.ProcessID] = *u.Process
		case u.Session != nil:
			s.sessions[u.Session.AuditID] = *u.Session
		}
	}
}

// checkExitOnly notes p, marked ExitOnly, unless the row it replaces with
// p's exit is p: a store that writes only the exit then holds p.
func (s *snapshot) checkExitOnly(p *Process) {
	s.exitOnly++
	prev, ok := s.procs[p.ProcessID]
	if !ok {
		s.badExitOnly = append(s.badExitOnly, p.ProcessID+": no row handed out before")
		return
	}
	prev.Exit, prev.ExitCode = p.Exit, p.ExitCode
	if !reflect.DeepEqual(prev, *p) {
		s.badExitOnly = append(s.badExitOnly, fmt.Sprintf("%s: more than the exit changed:\nwas %+v\nnow %+v",
			p.ProcessID, prev, *p))
	}
}

// canonical renders what must not depend on arrival order: everything but
// the late mark (late_audit_record, RecordDelay), which says when a record
// arrived and nothing else.
func (s *snapshot) canonical() string {
	var lines []string
	for id, p := range s.procs {
		p.Flags = slices.DeleteFunc(slices.Clone(p.Flags), func(f string) bool { return f == vocab.FlagLateAuditRecord })
		ec := "-"
		if p.ExitCode != nil {
			ec = fmt.Sprint(*p.ExitCode)
		}
		lines = append(lines, fmt.Sprintf("p %s attr=%q id=%s conf=%.3f cand=%v flags=%v exit=%s",
			id, p.Attribution, p.AuditID, p.Confidence, p.Candidates, p.Flags, ec))
	}
	for id, se := range s.sessions {
		lines = append(lines, fmt.Sprintf("s %s user=%s code=%d stages=%v flags=%v n=%d conflicts=%d",
			id, se.User.Username, se.Code, se.Stages, se.Flags, se.ProcessCount, len(se.Conflicts)))
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

func hasAll(have []string, want ...string) bool {
	for _, w := range want {
		if !slices.Contains(have, w) {
			return false
		}
	}
	return true
}

// windowsClosed is a time by which every heuristic window and hold of
// requests received up to t has closed (holdsDeadline), inside the TTL.
func windowsClosed(t time.Time) time.Time {
	return t.Add(2*DefaultHeuristicWindow + DefaultAuditLag + 30*time.Second)
}

// propertyRand is a property test's generator, seeded from JOIN_SEED or
// the clock; the seed is logged so that a failure can be rerun.
func propertyRand(t *testing.T) (int64, *rand.Rand) {
	seed := time.Now().UnixNano()
	if s, err := strconv.ParseInt(os.Getenv("JOIN_SEED"), 10, 64); err == nil {
		seed = s
	}
	t.Logf("seed %d (rerun with JOIN_SEED=%d)", seed, seed)
	return seed, rand.New(rand.NewSource(seed))
}
