package render

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/execid/correlator/pkg/api"
)

// update rewrites testdata/*.golden from what the renderers print now:
// go test ./pkg/render -update. A test flag, the only package variable.
var update = flag.Bool("update", false, "rewrite testdata/*.golden")

// golden compares got with testdata/name.golden.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading golden file (go test -update writes it): %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from %s:\n%s", name, path, got)
	}
}

// TestGolden prints every answer in every format that applies to it.
func TestGolden(t *testing.T) {
	all := []Format{Table, Wide, JSON, YAML}
	for _, tc := range []struct {
		name    string
		formats []Format
		print   func(*Printer) error
	}{
		{"session-page", all, func(p *Printer) error { return p.SessionPage(sessionPage()) }},
		{"process-page", all, func(p *Printer) error { return p.ProcessPage(processPage()) }},
		{"session", []Format{Table, JSON, YAML}, func(p *Printer) error { return p.Session(aliceView()) }},
		{"session-impersonated", []Format{Table}, func(p *Printer) error { return p.Session(bobView()) }},
		{"cluster-sessions", all, func(p *Printer) error { return p.Sessions(clusterSessions()) }},
		{"who", all, func(p *Printer) error { return p.Who(who("node-a")) }},
		{"who-gone", []Format{Table, Wide}, func(p *Printer) error { return p.Who(who("")) }},
		{"who-none", []Format{Table, JSON}, func(p *Printer) error {
			a := who("node-a")
			a.Items = nil
			return p.Who(a)
		}},
		{"who-in", all, func(p *Printer) error { return p.WhoIn(whoIn()) }},
		{"who-in-none", []Format{Table}, func(p *Printer) error {
			a := whoIn()
			a.Items, a.Namespace = nil, ""
			return p.WhoIn(a)
		}},
		{"session-views", []Format{Table, JSON, YAML}, func(p *Printer) error { return p.SessionViews(sessionViews()) }},
		{"alerts", all, func(p *Printer) error { return p.Alerts(alerts()) }},
		{"process-page-pending", all, func(p *Printer) error {
			return p.ProcessPage(api.ProcessPage{Items: pendingProcesses()})
		}},
		{"session-pending", []Format{Table, JSON}, func(p *Printer) error { return p.Session(pendingView()) }},
	} {
		for _, f := range tc.formats {
			t.Run(tc.name+"-"+string(f), func(t *testing.T) {
				var b bytes.Buffer
				if err := tc.print(New(&b, f)); err != nil {
					t.Fatal(err)
				}
				golden(t, tc.name+"."+string(f), b.Bytes())
			})
		}
	}
}

// TestUnanswered: a partial answer and an answer no node gave name the
// nodes that did not answer; a complete one prints nothing.
func TestUnanswered(t *testing.T) {
	var b bytes.Buffer
	a := clusterSessions()
	Unanswered(&b, a.Incomplete())
	a.Nodes = 1
	Unanswered(&b, a.Incomplete())
	a.Unreachable = nil
	Unanswered(&b, a.Incomplete())
	Unanswered(&b, errors.New("not an answer"))
	golden(t, "unanswered", b.Bytes())
}

func TestParseFormat(t *testing.T) {
	for in, want := range map[string]Format{"": Table, "table": Table, "wide": Wide, "json": JSON, "yaml": YAML} {
		if got, err := ParseFormat(in); err != nil || got != want {
			t.Errorf("ParseFormat(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"xml", "JSON", "name", "go-template"} {
		if _, err := ParseFormat(in); err == nil || !strings.Contains(err.Error(), "want table, wide, json or yaml") {
			t.Errorf("ParseFormat(%q): %v, want an error naming the formats", in, err)
		}
	}
	if !JSON.Machine() || !YAML.Machine() || Table.Machine() || Wide.Machine() {
		t.Error("Machine: want json and yaml only")
	}
}

// rows are a table's lines with the padding squeezed to one space.
func rows(b fmt.Stringer) []string {
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(b.String()), "\n") {
		out = append(out, strings.Join(strings.Fields(l), " "))
	}
	return out
}
