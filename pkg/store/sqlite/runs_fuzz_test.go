package sqlite

import (
	"bytes"
	"encoding/json"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/execid/correlator/pkg/capture"
	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/vocab"
)

// FuzzRunEntry: a runnable process written as a run's line reads back as
// encoding/json reads the same process (and its evidence), with its
// start, times and command from the line's head and its session and
// container from the run; and whatever a line holds, reading it never
// panics.
func FuzzRunEntry(f *testing.F) {
	f.Add("41-7", "/bin/true", "spo", "flag", int64(1_772_366_400_000_000_000), int64(3), 5, 0.25, []byte(`{"startNs":1,"commandID":2,"seq":3,"processID":"x","exitCode":0}`))
	f.Add("a\"b\\", "/tmp/é\u2028", "", "", int64(-5), int64(0), 0, 0.0, []byte("{\"startNs\":9,\"commandID\":0,\"seq\":1023,\"exitCode\":1,\"flags\":[\"\\u0000\"]}"))
	f.Fuzz(func(t *testing.T, id, filename, spo, flag string, start, command int64, seq int, conf float64, raw []byte) {
		r := runRow{id: 7, key: runKey{auditID: "aid", namespace: "ns", pod: "pod", container: "ctr",
			attribution: string(vocab.AttributionInherited), containerID: "c0ffee", podUID: "uid", sessionRootID: "1-1"}}
		// An arbitrary line: an error, or a process of the run's.
		if p, _, _, err := decodeEntry(raw, &r); err == nil && (p.AuditID != "aid" || p.ExitCode == nil) {
			t.Fatalf("line %q read as %+v", raw, p)
		}
		entryHead(raw)
		p := process(id, "aid", 0)
		p.Start, p.ExecTime = time.Unix(0, start).UTC(), time.Unix(0, start+1).UTC()
		p.Exit, p.ExitCode = time.Unix(0, start+2).UTC(), ptr(seq%256)
		p.Filename, p.SPOExecRequestUID, p.Confidence, p.Flags = filename, spo, conf, []string{flag}
		p.Namespace, p.Pod, p.Container, p.Attribution = "ns", "pod", "ctr", vocab.AttributionInherited
		// The container ID is the run's; the pod UID (empty) and the
		// session root (any) are the line's own.
		p.ContainerID, p.PodUID, p.SessionRootID, p.Argv = "c0ffee", "", flag, nil
		// The evidence, from the same strings.
		p.Captured = capture.KeyValue{Value: id, Source: vocab.Source(spo), Flags: []string{flag}}
		p.Bridge.Claimed, p.ExecOrigin, p.RecordDelay = spo, capture.Origin(filename), conf
		if start == 0 || start == -1 || start == -2 {
			return // the zero time is no time: nanos stores it as 0
		}
		if !runnable(&p) {
			return
		}
		seq = min(max(seq, 0), maxRunEntries-1)
		line, err := appendRunEntry(nil, &p, command, seq, &r.key)
		if err != nil || !json.Valid(line) || bytes.IndexByte(line, '\n') >= 0 {
			t.Fatalf("%q: %v", line, err)
		}
		gs, gc, gq, ok := entryHead(line)
		if !ok || gs != start || gc != command || gq != seq {
			t.Fatalf("head of %q read %d %d %d %v", line, gs, gc, gq, ok)
		}
		got, gotCommand, gotID, err := decodeEntry(line, &r)
		if err != nil || gotCommand != command || gotID != entryID(7, seq) {
			t.Fatalf("%q: read %d, %d, %v", line, gotCommand, gotID, err)
		}
		// The reference: the process through encoding/json.
		ref, _ := json.Marshal(p)
		var want join.Process
		if err := json.Unmarshal(ref, &want); err != nil {
			t.Fatal(err)
		}
		if flag == "" {
			want.Flags = []string{""}
		}
		ev, _ := json.Marshal(detailEvidence{p.Captured, p.SPO, p.Bridge, p.ExecOrigin})
		var wantEv detailEvidence
		if err := json.Unmarshal(ev, &wantEv); err != nil {
			t.Fatal(err)
		}
		wantEv.set(&want)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("line %s read\n%+v\nwant\n%+v", line, got, want)
		}
		// Lines come back newest first, whole.
		body := runBody([][]byte{line, []byte(`{"startNs":1}`), line})
		var lines [][]byte
		if err := eachLineNewest(body, func(l []byte) bool { lines = append(lines, l); return true }); err != nil ||
			len(lines) != 3 || !bytes.Equal(lines[0], line) || !bytes.Equal(lines[1], []byte(`{"startNs":1}`)) {
			t.Fatalf("lines of %q: %q, %v", body, lines, err)
		}
		if split, err := runLines(body); err != nil || !slices.EqualFunc(split, []([]byte){line, []byte(`{"startNs":1}`), line}, bytes.Equal) {
			t.Fatalf("split %q: %q, %v", body, split, err)
		}
	})
}
