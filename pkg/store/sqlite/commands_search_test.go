package sqlite

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/store"
)

// TestCommandSearchBytes: the command search finds exactly the processes
// (and the sessions) whose line holds the substring byte for byte, as
// strings.Contains does, for lines an attacker shapes to slip past it
// (quotes, SQL and search syntax, multibyte and invalid UTF-8 next to the
// substring, NUL bytes) and for substrings that begin or end inside a
// character (instr on text missed those). Each substring but one in ten
// is cut from a stored line: a run that finds too little fails.
func TestCommandSearchBytes(t *testing.T) {
	s := openTest(t)
	rng := rand.New(rand.NewPCG(7, 32))
	atoms := []string{"a", "b", "ab", "abc", "cab", " ", "\"", "\"\"", "*", "%", "_", "NEAR(", "é", "日本", "\xff", "\xc3", "\x80", "\x00", "-", "/etc/sh", "adow"}
	word := func() string {
		var b strings.Builder
		for range 1 + rng.IntN(6) {
			b.WriteString(atoms[rng.IntN(len(atoms))])
		}
		return b.String()
	}
	var procs []join.Process
	lines := map[string]string{} // process ID -> its line
	for i := range 300 {
		argv := []string{word(), word()}
		p := withArgv(process(fmtIDs("p", 300)[i], "s", i), argv...)
		procs = append(procs, p)
		lines[p.ProcessID] = strings.Join(argv, " ")
	}
	var sessions []join.Session
	for i := range 60 {
		ss := session(fmtIDs("s", 60)[i], "alice", i)
		ss.Command = []string{word(), word()}
		sessions = append(sessions, ss)
	}
	mustUpsert(t, s, sessions, procs)
	found, foundS := 0, 0
	for range 400 {
		line := lines[procs[rng.IntN(len(procs))].ProcessID]
		if rng.IntN(4) == 0 {
			line = strings.Join(sessions[rng.IntN(len(sessions))].Command, " ")
		}
		lo := rng.IntN(len(line))
		sub := line[lo : lo+1+rng.IntN(min(12, len(line)-lo))]
		if rng.IntN(10) == 0 {
			sub = word() // perhaps nobody's
		}
		var want []string
		for i := len(procs) - 1; i >= 0; i-- { // newest first, as listed
			if strings.Contains(lines[procs[i].ProcessID], sub) {
				want = append(want, procs[i].ProcessID)
			}
		}
		got := processIDs(allProcesses(t, s, store.ProcessFilter{Command: sub}))
		if !slices.Equal(got, want) {
			t.Fatalf("command %q: %v, want %v", sub, got, want)
		}
		var wantS []string
		for i := len(sessions) - 1; i >= 0; i-- {
			if strings.Contains(strings.Join(sessions[i].Command, " "), sub) {
				wantS = append(wantS, sessions[i].AuditID)
			}
		}
		if gotS := sessionIDs(allSessions(t, s, store.SessionFilter{Command: sub})); !slices.Equal(gotS, wantS) {
			t.Fatalf("sessions asking for %q: %v, want %v", sub, gotS, wantS)
		}
		if len(want) > 0 {
			found++
		}
		if len(wantS) > 0 {
			foundS++
		}
	}
	if found < 300 || foundS < 50 {
		t.Fatalf("%d searches of 400 found a process, %d a session: the test lost its positive control", found, foundS)
	}
}
