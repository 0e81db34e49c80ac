package apidoc

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite docs/api.md from pkg/api/openapi.json")

const (
	openapiPath = "../../pkg/api/openapi.json"
	apiMDPath   = "../../docs/api.md"
)

// TestAPIDocUpToDate: the committed reference is what the generator makes
// of the committed OpenAPI document.
func TestAPIDocUpToDate(t *testing.T) {
	spec, err := os.ReadFile(openapiPath)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Markdown(spec)
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile(apiMDPath, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(apiMDPath)
	if err != nil {
		t.Fatalf("%v (generate it: go test ./internal/apidoc -update)", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("docs/api.md is stale: regenerate it with go test ./internal/apidoc -update")
	}
}

// TestEverythingDocumented: every operation, parameter, status, schema and
// field of the document appears in the reference.
func TestEverythingDocumented(t *testing.T) {
	spec, err := os.ReadFile(openapiPath)
	if err != nil {
		t.Fatal(err)
	}
	md, err := Markdown(spec)
	if err != nil {
		t.Fatal(err)
	}
	out := string(md)
	var d Document
	if err := json.Unmarshal(spec, &d); err != nil {
		t.Fatal(err)
	}
	must := func(s string) {
		t.Helper()
		if !strings.Contains(out, s) {
			t.Errorf("reference lacks %q", s)
		}
	}
	n := 0
	for p, ops := range d.Paths {
		for m, op := range ops {
			n++
			must("### " + strings.ToUpper(m) + " " + p + "\n")
			for _, prm := range op.Parameters {
				must("| `" + prm.Name + "` | " + prm.In + " |")
			}
			for code := range op.Responses {
				must("| " + code + " | ")
			}
		}
	}
	for name, s := range d.Components.Schemas {
		must("### " + name + "\n")
		for f := range s.Properties {
			must("| `" + f + "` |")
		}
	}
	if n < 9 {
		t.Errorf("only %d operations in the document", n)
	}
}

func TestMarkdownRejects(t *testing.T) {
	for in, want := range map[string]string{
		`{`:                            "parsing OpenAPI document",
		`{"openapi":"2.0","paths":{}}`: "want 3.x",
		`{"openapi":"3.0.3"}`:          "no paths",
	} {
		if _, err := Markdown([]byte(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want %q", in, err, want)
		}
	}
}

func TestTypeOf(t *testing.T) {
	min := 1.0
	for _, c := range []struct {
		s    *Schema
		want string
	}{
		{&Schema{Ref: "#/components/schemas/SessionView"}, "[SessionView](#sessionview)"},
		{&Schema{Type: "array", Items: &Schema{Type: "string"}}, "array of string"},
		{&Schema{Type: "string", Format: "date-time"}, "string (date-time)"},
		{&Schema{Type: "string", Enum: []any{"a", "b"}}, "string (one of `a`, `b`)"},
		{&Schema{Type: "integer", Minimum: &min}, "integer (minimum 1)"},
		{&Schema{Type: "object", Properties: map[string]*Schema{"b": {Type: "string"}, "a": {Type: "integer"}}, Required: []string{"a"}},
			"object { `a` (required): integer, `b`: string }"},
		{&Schema{Type: "object", AdditionalP: &Schema{Type: "string"}}, "map of string to string"},
	} {
		if got := typeOf(c.s); got != c.want {
			t.Errorf("typeOf(%+v) = %q, want %q", c.s, got, c.want)
		}
	}
}

// FuzzMarkdown: any input is rendered or refused, never a panic.
func FuzzMarkdown(f *testing.F) {
	if spec, err := os.ReadFile(openapiPath); err == nil {
		f.Add(spec)
	}
	f.Add([]byte(`{"openapi":"3.0.0","paths":{"/x":{"get":{"responses":{"200":{"description":"ok"}}}}}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = Markdown(b)
	})
}
