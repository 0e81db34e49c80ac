package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/execid/correlator/pkg/capture"
	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/store"
	"github.com/execid/correlator/pkg/vocab"
)

// detailFields is a process with every field detail holds set, and none
// of the columns'.
func detailFields() join.Process {
	var p join.Process
	p.ParentProcessID, p.PID, p.PPID, p.UID = "41-7", 1<<32-1, 1, 65534
	p.ArgvTruncated, p.ContainerID, p.PodUID, p.SessionRootID = true, "c0ffee", "6f1c1a0e", "40-2"
	p.Source, p.Confidence = vocab.SourceInherited, 0.25
	p.Candidates, p.Flags = []string{"s1", "s2"}, []string{"env_removed", "late"}
	p.RecordDelay = 12.5
	p.PendingUntil = time.Date(2026, 3, 4, 10, 1, 0, 123456789, time.UTC)
	p.Captured = capture.KeyValue{Value: "s1", Claimed: "s0", Source: vocab.SourceEnv, Flags: []string{"env_mismatch"}}
	p.SPO = capture.KeyValue{Value: "spo-1", Source: vocab.SourceEnv}
	p.Bridge = capture.KeyValue{Value: "s1", Flags: []string{"x"}}
	p.ExecOrigin = capture.OriginRuntimeChild
	return p
}

// TestProcessDetailJSON: detail is valid JSON that reads back as written,
// for strings that need escaping too; zero values are left out; a key
// detail should not hold leaves the column's value alone.
func TestProcessDetailJSON(t *testing.T) {
	hostile := "a\"b\\c\n\x00\x1f<>&é\u2028"
	for name, edit := range map[string]func(*join.Process){
		"every field":   func(*join.Process) {},
		"escaped":       func(p *join.Process) { p.ContainerID, p.Flags = hostile, []string{hostile, ""} },
		"tiny number":   func(p *join.Process) { p.Confidence = 1e-300 },
		"one":           func(p *join.Process) { p.Confidence = 1 },
		"bad utf-8":     func(p *join.Process) { p.PodUID = "\xff\xfe" },
		"zero":          func(p *join.Process) { *p = join.Process{} },
		"no candidates": func(p *join.Process) { p.Candidates = nil },
		"no evidence": func(p *join.Process) {
			p.Captured, p.SPO, p.Bridge, p.ExecOrigin, p.RecordDelay = capture.KeyValue{}, capture.KeyValue{}, capture.KeyValue{}, "", 0
		},
		"origin alone": func(p *join.Process) {
			p.Captured, p.SPO, p.Bridge = capture.KeyValue{}, capture.KeyValue{}, capture.KeyValue{}
		},
		"bridge alone": func(p *join.Process) {
			p.Captured, p.SPO, p.ExecOrigin = capture.KeyValue{}, capture.KeyValue{}, ""
			p.Bridge = capture.KeyValue{Claimed: "s9"}
		},
		"escaped evidence": func(p *join.Process) {
			p.Captured = capture.KeyValue{Value: hostile, Claimed: hostile, Source: vocab.Source(hostile), Flags: []string{hostile, ""}}
			p.ExecOrigin = capture.Origin(hostile)
		},
		"tiny delay": func(p *join.Process) { p.RecordDelay = 5e-324 },
		"pending, whole second": func(p *join.Process) {
			p.PendingUntil = time.Date(2026, 3, 4, 10, 1, 0, 0, time.UTC)
		},
		"pending, in a zone": func(p *join.Process) {
			p.PendingUntil = time.Date(2026, 3, 4, 11, 1, 0, 5, time.FixedZone("CET", 3600))
		},
	} {
		t.Run(name, func(t *testing.T) {
			p := detailFields()
			edit(&p)
			b, err := processDetailJSON(nil, &p)
			if err != nil {
				t.Fatal(err)
			}
			if !json.Valid(b) {
				t.Fatalf("not JSON: %s", b)
			}
			want := p
			if want.PodUID == "\xff\xfe" {
				want.PodUID = "\ufffd\ufffd" // as encoding/json writes it
			}
			if !want.PendingUntil.IsZero() {
				want.PendingUntil = want.PendingUntil.UTC() // the instant, in UTC
			}
			var got join.Process
			if err := readProcessDetail(sql.NullString{String: string(b), Valid: true}, &got); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("read back\n got %+v\nwant %+v\nfrom %s", got, want, b)
			}
		})
	}
	var zero join.Process
	if b, _ := processDetailJSON(nil, &zero); string(b) != "{}" {
		t.Errorf("a zero process's detail is %s, want {}", b)
	}
	p := detailFields()
	p.Confidence = math.NaN()
	if _, err := processDetailJSON(nil, &p); err == nil {
		t.Error("a NaN confidence encoded without an error")
	}
	p = detailFields()
	p.RecordDelay = math.Inf(1)
	if _, err := processDetailJSON(nil, &p); err == nil {
		t.Error("an infinite record delay encoded without an error")
	}
	// Evidence empty but for an empty flag list is none.
	p = join.Process{Captured: capture.KeyValue{Flags: []string{}}}
	if b, _ := processDetailJSON(nil, &p); string(b) != "{}" {
		t.Errorf("empty evidence's detail is %s, want {}", b)
	}
	got := join.Process{AuditID: "s-real", Namespace: "prod"}
	if err := readProcessDetail(sql.NullString{String: `{"auditID":"s-forged","namespace":"x","pid":7}`, Valid: true}, &got); err != nil {
		t.Fatal(err)
	}
	if got.AuditID != "s-real" || got.Namespace != "prod" || got.PID != 7 {
		t.Errorf("detail overwrote a column or lost its own: %+v", got)
	}
	if err := readProcessDetail(sql.NullString{String: `{"pid":`, Valid: true}, &got); err == nil {
		t.Error("a broken detail read without an error")
	}
}

// TestProcessDetailOlderColumns: a detail column written before the
// evidence and the record delay were (or by another writer) reads back
// zero values for them, and keys it does not know are ignored.
func TestProcessDetailOlderColumns(t *testing.T) {
	for name, tc := range map[string]struct {
		col  string
		want func(*join.Process)
	}{
		"version 8": {`{"parentProcessID":"41-7","pid":7,"source":"inherited","flags":["late"]}`, func(p *join.Process) {
			p.ParentProcessID, p.PID, p.Source, p.Flags = "41-7", 7, vocab.SourceInherited, []string{"late"}
		}},
		"empty":          {`{}`, func(*join.Process) {}},
		"null evidence":  {`{"pid":7,"evidence":null}`, func(p *join.Process) { p.PID = 7 }},
		"empty evidence": {`{"evidence":{},"recordDelaySeconds":0}`, func(*join.Process) {}},
		"unknown keys": {`{"pid":7,"later":{"x":[1]},"evidence":{"captured":{"value":"s1","later":true},"later":1}}`,
			func(p *join.Process) { p.PID, p.Captured.Value = 7, "s1" }},
		"API's keys for the hidden fields": {`{"Captured":{"value":"s1"},"captured":{"value":"s1"},"execOrigin":"inside"}`,
			func(*join.Process) {}},
	} {
		t.Run(name, func(t *testing.T) {
			// A process read from a row before: what it held is replaced.
			got := join.Process{RecordDelay: 3, ExecOrigin: capture.OriginInside, Captured: capture.KeyValue{Value: "old"}}
			if err := readProcessDetail(sql.NullString{String: tc.col, Valid: true}, &got); err != nil {
				t.Fatal(err)
			}
			var want join.Process
			tc.want(&want)
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("read %s as\n%+v\nwant\n%+v", tc.col, got, want)
			}
		})
	}
	for _, col := range []string{`{"evidence":[]}`, `{"evidence":{"captured":{"flags":"late"}}}`, `{"recordDelaySeconds":"1"}`} {
		if err := readProcessDetail(sql.NullString{String: col, Valid: true}, &join.Process{}); err == nil {
			t.Errorf("detail %s read without an error", col)
		}
	}
}

// FuzzProcessDetail: any strings and numbers encode to valid JSON that
// reads back as encoding/json would have written them, the evidence too.
func FuzzProcessDetail(f *testing.F) {
	f.Add("41-7", "c0ffee", "late", uint32(7), 0.25, true)
	f.Add("a\"b\\", "\x00\xff", "é\u2028", uint32(0), 0.0, false)
	f.Fuzz(func(t *testing.T, parent, container, flag string, pid uint32, conf float64, trunc bool) {
		p := join.Process{}
		p.ParentProcessID, p.ContainerID, p.PID, p.Confidence, p.ArgvTruncated = parent, container, pid, conf, trunc
		p.Flags = []string{flag}
		// The evidence from the same strings: each key present or not
		// as they are empty or not (pid chooses which).
		p.Captured = capture.KeyValue{Value: parent, Claimed: container, Source: vocab.Source(flag)}
		if pid&1 != 0 {
			p.Captured.Flags = []string{flag, container}
		}
		if pid&2 != 0 {
			p.SPO.Value = container
		}
		if pid&4 != 0 {
			p.Bridge = capture.KeyValue{Claimed: flag, Flags: []string{parent}}
		}
		p.ExecOrigin, p.RecordDelay = capture.Origin(flag), conf
		if pid&8 != 0 {
			p.PendingUntil = time.Unix(int64(pid), int64(pid)%1e9).UTC()
		}
		b, err := processDetailJSON(nil, &p)
		if math.IsNaN(conf) || math.IsInf(conf, 0) {
			if err == nil {
				t.Fatal("a non-finite confidence encoded")
			}
			return
		}
		if err != nil || !json.Valid(b) {
			t.Fatalf("%q: %v", b, err)
		}
		// What encoding/json makes of the same fields is the reference.
		ref, _ := json.Marshal(p)
		var want, got join.Process
		if err := json.Unmarshal(ref, &want); err != nil {
			t.Fatal(err)
		}
		if err := readProcessDetail(sql.NullString{String: string(b), Valid: true}, &got); err != nil {
			t.Fatal(err)
		}
		if got.ParentProcessID != want.ParentProcessID || got.ContainerID != want.ContainerID || got.PID != want.PID ||
			got.Confidence != want.Confidence || got.ArgvTruncated != want.ArgvTruncated || !reflect.DeepEqual(got.Flags, want.Flags) ||
			got.RecordDelay != want.RecordDelay || !got.PendingUntil.Equal(want.PendingUntil) {
			t.Fatalf("read back %+v, want %+v (from %s)", got, want, b)
		}
		ev, _ := json.Marshal(detailEvidence{p.Captured, p.SPO, p.Bridge, p.ExecOrigin})
		var wantEv detailEvidence
		if err := json.Unmarshal(ev, &wantEv); err != nil {
			t.Fatal(err)
		}
		if gotEv := (detailEvidence{got.Captured, got.SPO, got.Bridge, got.ExecOrigin}); !reflect.DeepEqual(gotEv, wantEv) {
			t.Fatalf("evidence read back %+v, want %+v (from %s)", gotEv, wantEv, b)
		}
	})
}

// TestOlderRowsReadNoEvidence: a processes row and a run's line written
// before the evidence was (detail and line as an older store wrote them)
// list with zero evidence and record delay, and as they were otherwise.
// Control: as this store writes them, both read back their evidence.
func TestOlderRowsReadNoEvidence(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	row, settled := process("row", "s1", 1), process("settled", "s1", 2)
	settled.Exit, settled.ExitCode = settled.Start.Add(time.Second), ptr(0)
	for _, p := range []*join.Process{&row, &settled} {
		p.Captured, p.ExecOrigin, p.RecordDelay = capture.KeyValue{Value: "s1", Source: vocab.SourceEnv}, capture.OriginInside, 2.5
	}
	mustUpsert(t, s, nil, []join.Process{row, settled})
	var runs int
	if err := s.r.QueryRowContext(ctx, `SELECT count(*) FROM process_runs`).Scan(&runs); err != nil || runs != 1 {
		t.Fatalf("control: %d runs, %v; want the exited process in one", runs, err)
	}
	read := func(what string) map[string]join.Process {
		t.Helper()
		ps, _, err := s.ListProcesses(ctx, store.ProcessFilter{})
		if err != nil || len(ps) != 2 {
			t.Fatalf("%s: ListProcesses = %d, %v", what, len(ps), err)
		}
		return map[string]join.Process{ps[0].ProcessID: ps[0], ps[1].ProcessID: ps[1]}
	}
	for id, p := range read("control") {
		if p.Captured.Value != "s1" || p.ExecOrigin != capture.OriginInside || p.RecordDelay != 2.5 {
			t.Fatalf("control: %s read back %+v", id, p)
		}
	}
	// What an older store wrote: no evidence key, no delay.
	const evidence = `,"recordDelaySeconds":2.5,"evidence":{"captured":{"value":"s1","source":"env"},"execOrigin":"inside"}`
	for _, q := range []string{`UPDATE processes SET detail = replace(detail, ?, '')`, `UPDATE process_runs SET body = replace(body, ?, '')`} {
		res, err := s.w.ExecContext(ctx, q, evidence)
		if err != nil {
			t.Fatal(err)
		}
		if n, _ := res.RowsAffected(); n != 1 {
			t.Fatalf("%s: %d rows", q, n)
		}
	}
	got := read("older")
	for _, want := range []join.Process{row, settled} {
		want.Captured, want.ExecOrigin, want.RecordDelay = capture.KeyValue{}, "", 0
		if g := got[want.ProcessID]; !reflect.DeepEqual(g, want) {
			t.Errorf("older %s read back\n%+v\nwant\n%+v", want.ProcessID, g, want)
		}
	}
}
