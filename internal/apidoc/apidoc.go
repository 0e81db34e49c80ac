// Package apidoc renders correlator's OpenAPI document (pkg/api/openapi.json)
// as the Markdown REST API reference in docs/api.md. Regenerate with
//
//	go test ./internal/apidoc -update
package apidoc

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
)

// Document is the part of OpenAPI 3.0 that the reference shows.
type Document struct {
	OpenAPI string `json:"openapi"`
	Info    struct {
		Title       string `json:"title"`
		Version     string `json:"version"`
		Description string `json:"description"`
	} `json:"info"`
	Components struct {
		SecuritySchemes map[string]struct {
			Type        string `json:"type"`
			Scheme      string `json:"scheme"`
			Description string `json:"description"`
		} `json:"securitySchemes"`
		Schemas map[string]*Schema `json:"schemas"`
	} `json:"components"`
	Security []map[string][]string            `json:"security"`
	Paths    map[string]map[string]*Operation `json:"paths"`
}

// Operation is one method on one path.
type Operation struct {
	Summary     string                 `json:"summary"`
	Description string                 `json:"description"`
	Parameters  []Parameter            `json:"parameters"`
	RequestBody *Body                  `json:"requestBody"`
	Responses   map[string]Response    `json:"responses"`
	Security    *[]map[string][]string `json:"security"`
}

// Parameter is a path or query parameter.
type Parameter struct {
	Name        string  `json:"name"`
	In          string  `json:"in"`
	Description string  `json:"description"`
	Required    bool    `json:"required"`
	Schema      *Schema `json:"schema"`
}

// Body is a request body.
type Body struct {
	Description string               `json:"description"`
	Required    bool                 `json:"required"`
	Content     map[string]MediaType `json:"content"`
}

// Response is one status code's answer.
type Response struct {
	Description string               `json:"description"`
	Content     map[string]MediaType `json:"content"`
}

// MediaType holds the schema of one content type.
type MediaType struct {
	Schema *Schema `json:"schema"`
}

// Schema is a JSON schema, as far as the reference renders it.
type Schema struct {
	Ref         string             `json:"$ref"`
	Type        string             `json:"type"`
	Format      string             `json:"format"`
	Description string             `json:"description"`
	Enum        []any              `json:"enum"`
	Items       *Schema            `json:"items"`
	Properties  map[string]*Schema `json:"properties"`
	Required    []string           `json:"required"`
	Minimum     *float64           `json:"minimum"`
	Maximum     *float64           `json:"maximum"`
	Nullable    bool               `json:"nullable"`
	AdditionalP *Schema            `json:"additionalProperties"`
}

var methodOrder = []string{"get", "post", "put", "patch", "delete"}

// Markdown renders an OpenAPI document as the API reference.
func Markdown(openapi []byte) ([]byte, error) {
	var d Document
	if err := json.Unmarshal(openapi, &d); err != nil {
		return nil, fmt.Errorf("parsing OpenAPI document: %w", err)
	}
	if !strings.HasPrefix(d.OpenAPI, "3.") {
		return nil, fmt.Errorf("parsing OpenAPI document: version %q, want 3.x", d.OpenAPI)
	}
	if len(d.Paths) == 0 {
		return nil, errors.New("parsing OpenAPI document: no paths")
	}
	var b bytes.Buffer
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	w("# %s reference (%s)\n\n", d.Info.Title, d.Info.Version)
	w("<!-- Generated from pkg/api/openapi.json by internal/apidoc: go test ./internal/apidoc -update. Do not edit. -->\n\n")
	w("%s\n\n", d.Info.Description)
	w("## Authentication\n\n")
	for _, name := range sortedKeys(d.Components.SecuritySchemes) {
		s := d.Components.SecuritySchemes[name]
		w("- `%s` (%s %s): %s\n", name, s.Type, s.Scheme, s.Description)
	}
	w("\nEndpoints require it unless marked **no authentication**.\n\n")

	w("## Endpoints\n\n")
	paths := sortedKeys(d.Paths)
	for _, p := range paths {
		for _, m := range methods(d.Paths[p]) {
			w("- [`%s %s`](#%s)\n", strings.ToUpper(m), p, anchor(strings.ToUpper(m)+" "+p))
		}
	}
	w("\n")
	for _, p := range paths {
		for _, m := range methods(d.Paths[p]) {
			writeOperation(&b, strings.ToUpper(m), p, d.Paths[p][m])
		}
	}
	w("## Schemas\n\n")
	for _, name := range sortedKeys(d.Components.Schemas) {
		s := d.Components.Schemas[name]
		w("### %s\n\n", name)
		if s.Description != "" {
			w("%s\n\n", s.Description)
		}
		if len(s.Properties) == 0 {
			w("%s\n\n", typeOf(s))
			continue
		}
		writeProperties(&b, s)
	}
	return b.Bytes(), nil
}

func writeOperation(b *bytes.Buffer, method, path string, op *Operation) {
	w := func(format string, a ...any) { fmt.Fprintf(b, format, a...) }
	w("### %s %s\n\n", method, path)
	if op.Summary != "" {
		w("%s.\n\n", strings.TrimSuffix(op.Summary, "."))
	}
	if op.Description != "" {
		w("%s\n\n", op.Description)
	}
	if op.Security != nil && len(*op.Security) == 0 {
		w("**No authentication.**\n\n")
	}
	if len(op.Parameters) > 0 {
		w("| parameter | in | type | required | meaning |\n|---|---|---|---|---|\n")
		for _, p := range op.Parameters {
			w("| `%s` | %s | %s | %s | %s |\n", p.Name, p.In, typeOf(p.Schema), yesNo(p.Required), cell(p.Description))
		}
		w("\n")
	}
	if op.RequestBody != nil {
		w("Request body")
		if op.RequestBody.Required {
			w(" (required)")
		}
		if d := cell(op.RequestBody.Description); d != "" {
			w(": %s", d)
		}
		w("\n\n")
		for _, ct := range sortedKeys(op.RequestBody.Content) {
			w("- `%s`: %s\n", ct, typeOf(op.RequestBody.Content[ct].Schema))
		}
		w("\n")
	}
	w("| status | meaning | body |\n|---|---|---|\n")
	for _, code := range sortedKeys(op.Responses) {
		r := op.Responses[code]
		var bodies []string
		for _, ct := range sortedKeys(r.Content) {
			bodies = append(bodies, fmt.Sprintf("`%s` %s", ct, typeOf(r.Content[ct].Schema)))
		}
		w("| %s | %s | %s |\n", code, cell(r.Description), strings.Join(bodies, "<br>"))
	}
	w("\n")
}

func writeProperties(b *bytes.Buffer, s *Schema) {
	fmt.Fprintf(b, "| field | type | required | meaning |\n|---|---|---|---|\n")
	for _, name := range sortedKeys(s.Properties) {
		p := s.Properties[name]
		fmt.Fprintf(b, "| `%s` | %s | %s | %s |\n", name, typeOf(p), yesNo(slices.Contains(s.Required, name)), cell(p.Description))
	}
	fmt.Fprintln(b)
}

// typeOf renders a schema's type on one line, linking named schemas.
func typeOf(s *Schema) string {
	if s == nil {
		return ""
	}
	if s.Ref != "" {
		name := s.Ref[strings.LastIndex(s.Ref, "/")+1:]
		return fmt.Sprintf("[%s](#%s)", name, anchor(name))
	}
	var t string
	switch {
	case s.Type == "array":
		t = "array of " + typeOf(s.Items)
	case s.Type == "object" && len(s.Properties) > 0:
		var fields []string
		for _, name := range sortedKeys(s.Properties) {
			req := ""
			if slices.Contains(s.Required, name) {
				req = " (required)"
			}
			fields = append(fields, fmt.Sprintf("`%s`%s: %s", name, req, typeOf(s.Properties[name])))
		}
		t = "object { " + strings.Join(fields, ", ") + " }"
	case s.Type == "object" && s.AdditionalP != nil:
		t = "map of string to " + typeOf(s.AdditionalP)
	case s.Type == "":
		t = "any"
	default:
		t = s.Type
	}
	var notes []string
	if s.Format != "" {
		notes = append(notes, s.Format)
	}
	if len(s.Enum) > 0 {
		var vs []string
		for _, v := range s.Enum {
			vs = append(vs, fmt.Sprintf("`%v`", v))
		}
		notes = append(notes, "one of "+strings.Join(vs, ", "))
	}
	if s.Minimum != nil {
		notes = append(notes, fmt.Sprintf("minimum %v", *s.Minimum))
	}
	if s.Maximum != nil {
		notes = append(notes, fmt.Sprintf("maximum %v", *s.Maximum))
	}
	if len(notes) > 0 {
		t += " (" + strings.Join(notes, "; ") + ")"
	}
	return t
}

func methods(ops map[string]*Operation) []string {
	var out []string
	for _, m := range methodOrder {
		if ops[m] != nil {
			out = append(out, m)
		}
	}
	return out
}

// anchor is GitHub's heading anchor: lower case, spaces to dashes, most
// punctuation dropped.
func anchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

// cell keeps a table cell on one line.
func cell(s string) string {
	return strings.NewReplacer("\n", " ", "|", `\|`).Replace(strings.TrimSpace(s))
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
