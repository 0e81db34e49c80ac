package sqlite

import (
	"bytes"
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/vocab"
)

// A run holds, in one row, the processes of one session (or claim) in one
// container that one transaction wrote and that had exited when it did
// (version 9). They are most of a busy session's processes (a build, a
// shell loop), and a row of their own cost each of them about 7.7 µs of
// the writer's CPU, a run about 3.5: binding a value and entering a B-tree
// cost modernc's SQLite about the same, and a run binds 14 values and
// enters nine B-trees for all of its processes, and one key each.
// process_run_keys maps each one's ID to its run, so that a later row of
// the same process (an upsert, a late exit) takes it out of the run: a
// process is stored once, in processes or in a run.
//
// The body is a JSON array, one process a line, oldest first, each under
// the API's names but for the times (nanoseconds) and the argv (its
// commands id): `sqlite3` reads it with json_each. Each line begins with
// its start and command id, so that a query skips what it does not want
// without decoding it.
var runTables = []string{
	`CREATE TABLE process_runs (
		id          INTEGER PRIMARY KEY,
		audit_id    TEXT NOT NULL,
		namespace   TEXT NOT NULL DEFAULT '',
		pod         TEXT NOT NULL DEFAULT '',
		container   TEXT NOT NULL DEFAULT '',
		attribution      TEXT NOT NULL DEFAULT '',
		claimed_audit_id TEXT NOT NULL DEFAULT '',
		container_id    TEXT NOT NULL DEFAULT '',
		pod_uid         TEXT NOT NULL DEFAULT '',
		session_root_id TEXT NOT NULL DEFAULT '',
		first_start INTEGER NOT NULL,
		last_start  INTEGER NOT NULL,
		last_exit   INTEGER NOT NULL,
		n           INTEGER NOT NULL,
		body        TEXT NOT NULL
	)`,
	processRunsAuditIndex,
	`CREATE INDEX process_runs_start ON process_runs (last_start)`,
	`CREATE INDEX process_runs_first ON process_runs (first_start)`,
	`CREATE INDEX process_runs_namespace ON process_runs (namespace, last_start)`,
	`CREATE INDEX process_runs_pod ON process_runs (pod, last_start)`,
	`CREATE INDEX process_runs_container ON process_runs (container, last_start)`,
	`CREATE INDEX process_runs_attribution ON process_runs (attribution, last_start)`,
	`CREATE INDEX process_runs_claimed ON process_runs (claimed_audit_id, last_start) WHERE claimed_audit_id != ''`,
	`CREATE TABLE process_run_keys (
		process_id TEXT PRIMARY KEY,
		run        INTEGER NOT NULL
	) WITHOUT ROWID`,
}

// runCommandTables list the commands each run holds (version 11), so that
// a search for a rare command reads the few runs that ran it rather than
// every run of the pod in its span (make soak: 445 ms at p99 over ten
// minutes of a busy pod's runs). A rewritten run may list a command it no
// longer holds: the search still reads each line's. The trigger forgets a
// deleted run's, whoever deletes it.
var runCommandTables = []string{
	`CREATE TABLE process_run_commands (
		command_id INTEGER NOT NULL,
		run        INTEGER NOT NULL,
		PRIMARY KEY (command_id, run)
	) WITHOUT ROWID`,
	`CREATE INDEX process_run_commands_run ON process_run_commands (run)`,
	`CREATE TRIGGER process_runs_forget_commands AFTER DELETE ON process_runs
	BEGIN DELETE FROM process_run_commands WHERE run = old.id; END`,
}

// runCommandsBound is each listed run's last start (version 14,
// commandruns.go).
var runCommandsBound = []string{
	`ALTER TABLE process_run_commands ADD COLUMN last_start INTEGER NOT NULL DEFAULT 0`,
	`UPDATE process_run_commands SET last_start = coalesce((SELECT r.last_start FROM process_runs r WHERE r.id = run), 0)`,
}

// runSpan bounds the starts a run holds: its processes started within
// one runSpan-aligned window, so a query for a time reads only the runs
// near it (a long-lived process exiting lands in a run of its own start's
// window, not in the newest one).
const runSpan = int64(10 * time.Second)

// maxRunEntries bounds a run; a process's place in its run (seq) is below
// it, and its listing id is -(run*maxRunEntries + seq) - 1: a row id of
// its own, below every processes row's, fixed for good.
const maxRunEntries = 1024

// runBodyGuess is the bytes a run's body is first given per process: about
// a line of make soak's (an exec-session process with its evidence), so
// most bodies are built without growing.
const runBodyGuess = 512

// A run's body is its lines, one a process, between runOpen and runClose
// and joined by runSep (runBody, insertRun; runContent reads them apart).
const runOpen, runSep, runClose = "[\n", ",\n", "\n]"

// runnable reports whether p may be stored in a run: exited (a running
// process's row changes at its exit) and holding nothing JSON would
// change (an invalid UTF-8 file name stays in a column, byte for byte).
func runnable(p *join.Process) bool {
	return !p.Exit.IsZero() && p.ExitCode != nil && p.ProcessID != "" && utf8.ValidString(p.ProcessID) &&
		utf8.ValidString(p.Filename) && utf8.ValidString(p.SPOExecRequestUID) &&
		!math.IsNaN(p.Confidence) && !math.IsInf(p.Confidence, 0) &&
		!math.IsNaN(p.RecordDelay) && !math.IsInf(p.RecordDelay, 0)
}

// runKey is what a run's processes share: their session and container,
// their attribution and claim, and the window of their starts (runSpan,
// no column). The container's and pod's IDs and the session root are the
// first process's, each line holding its own only where it differs: most
// lines would repeat them, but a burst of processes each its own root
// must not make a run each.
type runKey struct {
	auditID, namespace, pod, container string
	attribution, claimedAuditID        string
	containerID, podUID, sessionRootID string // defaults, not grouped on
	window                             int64
}

// runKeyOf is p's run, the defaults left to the run's first process.
func runKeyOf(p *join.Process) runKey {
	return runKey{auditID: p.AuditID, namespace: p.Namespace, pod: p.Pod, container: p.Container,
		attribution: string(p.Attribution), claimedAuditID: p.ClaimedAuditID, window: floorDiv(nanos(p.Start), runSpan)}
}

// withDefaults is k with p's container and pod IDs and session root as
// the run's defaults.
func (k runKey) withDefaults(p *join.Process) runKey {
	k.containerID, k.podUID, k.sessionRootID = p.ContainerID, p.PodUID, p.SessionRootID
	return k
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// runCols are a run's key columns, in runKey's order.
const runCols = `audit_id, namespace, pod, container, attribution, claimed_audit_id, container_id, pod_uid,
	session_root_id`

// args are the key's values, in runCols' order.
func (k *runKey) args() []any {
	return []any{k.auditID, k.namespace, k.pod, k.container, k.attribution, k.claimedAuditID, k.containerID,
		k.podUID, k.sessionRootID}
}

// scanArgs are the destinations of runCols.
func (k *runKey) scanArgs() []any {
	return []any{&k.auditID, &k.namespace, &k.pod, &k.container, &k.attribution, &k.claimedAuditID,
		&k.containerID, &k.podUID, &k.sessionRootID}
}

// runEntry is one line of a run's body. The process's own fields are read
// into Process, whose start, exec and exit times are left zero: the line
// holds them as nanoseconds. The IDs a run holds defaults of are read
// apart (shallower fields win), absent where the line takes the run's.
// The evidence, the object a detail column holds, is read apart too.
type runEntry struct {
	join.Process
	StartNs       int64   `json:"startNs"`
	CommandID     int64   `json:"commandID"`
	Seq           int     `json:"seq"`
	ExecNs        int64   `json:"execNs"`
	ExitNs        int64   `json:"exitNs"`
	ContainerID   *string `json:"containerID"`
	PodUID        *string `json:"podUID"`
	SessionRootID *string `json:"sessionRootID"`

	Evidence *detailEvidence `json:"evidence"`
}

// runEntryKey is what rewriting a run reads of a line, the lines kept
// being copied as they are: a process leaving its run (a later row of it)
// decoded every line of the run whole, 4.7 µs each with encoding/json,
// and it was a ninth of the soak's agent's CPU; this costs 1.5.
type runEntryKey struct {
	ProcessID string `json:"processID"`
	StartNs   int64  `json:"startNs"`
	ExitNs    int64  `json:"exitNs"`
}

// appendRunEntry appends p's line in run k: start and command id first
// (entryHead reads them alone), then its other fields, the detail ones as
// processDetailJSON writes them, then the IDs that differ from k's.
func appendRunEntry(b []byte, p *join.Process, command int64, seq int, k *runKey) ([]byte, error) {
	b = strconv.AppendInt(append(b, `{"startNs":`...), nanos(p.Start), 10)
	b = strconv.AppendInt(append(b, `,"commandID":`...), command, 10)
	b = strconv.AppendInt(append(b, `,"seq":`...), int64(seq), 10)
	b = jsonString(append(b, `,"processID":`...), p.ProcessID)
	if p.Filename != "" {
		b = jsonString(append(b, `,"filename":`...), p.Filename)
	}
	b = strconv.AppendInt(append(b, `,"execNs":`...), nanos(p.ExecTime), 10)
	b = strconv.AppendInt(append(b, `,"exitNs":`...), nanos(p.Exit), 10)
	b = strconv.AppendInt(append(b, `,"exitCode":`...), int64(*p.ExitCode), 10)
	if p.SPOExecRequestUID != "" {
		b = jsonString(append(b, `,"spoExecRequestUID":`...), p.SPOExecRequestUID)
	}
	at := len(b)
	d := *p // what the run's columns hold is left out of the line
	d.ContainerID, d.PodUID, d.SessionRootID = "", "", ""
	b, err := processDetailJSON(b, &d)
	if err != nil {
		return b, err
	}
	if len(b)-at == 2 { // {}: no detail
		b = b[:at]
	} else {
		b[at] = ','      // the detail object's members continue the line's
		b = b[:len(b)-1] // and its end is the line's
	}
	for _, f := range [...]struct{ key, v, def string }{{"containerID", p.ContainerID, k.containerID},
		{"podUID", p.PodUID, k.podUID}, {"sessionRootID", p.SessionRootID, k.sessionRootID}} {
		if f.v != f.def { // an empty one too: it is not the run's
			b = jsonString(append(append(append(b, `,"`...), f.key...), `":`...), f.v)
		}
	}
	return append(b, '}'), nil
}

// entryHead reads a line's start, command id and seq without decoding
// it: they begin every line, in that order (appendRunEntry).
func entryHead(line []byte) (start, command int64, seq int, ok bool) {
	var v [3]int64
	rest := line
	for i, key := range []string{`{"startNs":`, `,"commandID":`, `,"seq":`} {
		if rest, ok = bytes.CutPrefix(rest, []byte(key)); !ok {
			return 0, 0, 0, false
		}
		end := bytes.IndexByte(rest, ',')
		if end < 0 {
			return 0, 0, 0, false
		}
		if v[i], ok = parseDecimal(rest[:end]); !ok {
			return 0, 0, 0, false
		}
		rest = rest[end:]
	}
	if v[2] < 0 || v[2] >= maxRunEntries {
		return 0, 0, 0, false
	}
	return v[0], v[1], int(v[2]), true
}

// runContent is a body's lines, still joined; empty for an empty run.
func runContent(body []byte) ([]byte, error) {
	if bytes.Equal(body, []byte("[]")) {
		return nil, nil
	}
	rest, ok := bytes.CutPrefix(body, []byte(runOpen))
	if ok {
		rest, ok = bytes.CutSuffix(rest, []byte(runClose))
	}
	if !ok || len(rest) == 0 {
		return nil, fmt.Errorf("decoding run body: not a line a process")
	}
	return rest, nil
}

// parseDecimal reads an int64 as strconv.AppendInt writes it: an
// optional minus and digits. strconv.ParseInt of the bytes as a string
// allocated the string, three times a line, and a command search walks
// thousands of lines.
func parseDecimal(b []byte) (int64, bool) {
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	if len(b) == 0 || len(b) > 19 {
		return 0, false
	}
	var n uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + uint64(c-'0') // 19 digits stay below 2^64
	}
	switch {
	case neg && n <= 1<<63:
		return int64(-n), true
	case !neg && n < 1<<63:
		return int64(n), true
	}
	return 0, false
}

// eachLineNewest calls fn with each line of a body, the newest first,
// until fn returns false; the body is not split. The separators are found
// front to back (a vector scan for the newline; LastIndex of ",\n"
// hashed every byte, a quarter of a command search's CPU in make soak),
// then the lines are visited back to front.
func eachLineNewest(body []byte, fn func(line []byte) bool) error {
	rest, err := runContent(body)
	if err != nil || rest == nil {
		return err
	}
	var buf [64]int
	starts := append(buf[:0], 0)
	// A line is JSON: its only newline is the separator's.
	for off := 0; ; {
		i := bytes.IndexByte(rest[off:], '\n')
		if i < 0 {
			break
		}
		off += i + 1
		if off < 2 || rest[off-2] != ',' {
			return fmt.Errorf("decoding run body: a newline inside a line")
		}
		starts = append(starts, off)
	}
	end := len(rest)
	for k := len(starts) - 1; k >= 0; k-- {
		if !fn(rest[starts[k]:end]) {
			return nil
		}
		end = starts[k] - 2
	}
	return nil
}

// runLines splits a body into its lines, one a process.
func runLines(body []byte) ([][]byte, error) {
	rest, err := runContent(body)
	if err != nil || rest == nil {
		return nil, err
	}
	return bytes.Split(rest, []byte(runSep)), nil
}

// runBody joins lines into a body.
func runBody(lines [][]byte) []byte {
	if len(lines) == 0 {
		return []byte("[]")
	}
	n := 4
	for _, l := range lines {
		n += len(l) + 2
	}
	b := append(make([]byte, 0, n), runOpen...)
	for i, l := range lines {
		if i > 0 {
			b = append(b, runSep...)
		}
		b = append(b, l...)
	}
	return append(b, runClose...)
}

// runRow is a run's columns.
type runRow struct {
	id  int64
	key runKey
}

// decodeEntry reads one line into a process of run r, the run's columns
// deciding what they hold whatever the line says.
func decodeEntry(line []byte, r *runRow) (join.Process, int64, int64, error) {
	var e runEntry
	if err := unmarshalJSON(line, &e); err != nil {
		return join.Process{}, 0, 0, fmt.Errorf("decoding process of run %d: %w", r.id, err)
	}
	if e.Seq < 0 || e.Seq >= maxRunEntries {
		return join.Process{}, 0, 0, fmt.Errorf("decoding process of run %d: seq %d out of range", r.id, e.Seq)
	}
	p := e.Process
	e.Evidence.set(&p)
	p.Start, p.ExecTime, p.Exit = fromNanos(e.StartNs), fromNanos(e.ExecNs), fromNanos(e.ExitNs)
	p.Argv = nil // from commands, by id
	k := &r.key
	p.AuditID, p.Namespace, p.Pod, p.Container = k.auditID, k.namespace, k.pod, k.container
	p.ContainerID, p.PodUID, p.SessionRootID = *cmp.Or(e.ContainerID, &k.containerID), *cmp.Or(e.PodUID, &k.podUID),
		*cmp.Or(e.SessionRootID, &k.sessionRootID)
	p.Attribution, p.ClaimedAuditID = vocab.Attribution(k.attribution), k.claimedAuditID
	if p.ExitCode == nil {
		return join.Process{}, 0, 0, fmt.Errorf("decoding process %s of run %d: no exit code", p.ProcessID, r.id)
	}
	return p, e.CommandID, entryID(r.id, e.Seq), nil
}

// entryID is a run's process's listing id.
func entryID(run int64, seq int) int64 { return -(run*maxRunEntries + int64(seq)) - 1 }

// sortRun orders a run's processes oldest first, as its body keeps them.
func sortRun(ps []*join.Process) {
	slices.SortStableFunc(ps, func(a, b *join.Process) int { return a.Start.Compare(b.Start) })
}
