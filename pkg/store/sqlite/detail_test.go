package sqlite

import (
	"database/sql"
	"encoding/json"
	"math"
	"reflect"
	"testing"

	"github.com/execid/correlator/pkg/join"
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

// FuzzProcessDetail: any strings and numbers encode to valid JSON that
// reads back as encoding/json would have written them.
func FuzzProcessDetail(f *testing.F) {
	f.Add("41-7", "c0ffee", "late", uint32(7), 0.25, true)
	f.Add("a\"b\\", "\x00\xff", "é\u2028", uint32(0), 0.0, false)
	f.Fuzz(func(t *testing.T, parent, container, flag string, pid uint32, conf float64, trunc bool) {
		p := join.Process{}
		p.ParentProcessID, p.ContainerID, p.PID, p.Confidence, p.ArgvTruncated = parent, container, pid, conf, trunc
		p.Flags = []string{flag}
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
			got.Confidence != want.Confidence || got.ArgvTruncated != want.ArgvTruncated || !reflect.DeepEqual(got.Flags, want.Flags) {
			t.Fatalf("read back %+v, want %+v (from %s)", got, want, b)
		}
	})
}
