package api

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/execid/correlator/pkg/auditlog"
	"github.com/execid/correlator/pkg/join"
	"github.com/execid/correlator/pkg/store"
)

// schema is the part of an OpenAPI 3.0 schema the contract tests check.
type schema struct {
	Ref         string             `json:"$ref"`
	Type        string             `json:"type"`
	Format      string             `json:"format"`
	Enum        []any              `json:"enum"`
	Items       *schema            `json:"items"`
	Properties  map[string]*schema `json:"properties"`
	Required    []string           `json:"required"`
	AdditionalP *schema            `json:"additionalProperties"`
	AllOf       []*schema          `json:"allOf"`
	Nullable    bool               `json:"nullable"`
}

type openAPIDoc struct {
	Components struct {
		Schemas map[string]*schema `json:"schemas"`
	} `json:"components"`
	Paths map[string]map[string]struct {
		Responses map[string]struct {
			Content map[string]struct {
				Schema *schema `json:"schema"`
			} `json:"content"`
		} `json:"responses"`
	} `json:"paths"`
}

func loadOpenAPI(t *testing.T) *openAPIDoc {
	t.Helper()
	var d openAPIDoc
	if err := json.Unmarshal(openAPI, &d); err != nil {
		t.Fatalf("parsing openapi.json: %v", err)
	}
	return &d
}

// resolve follows $ref and merges allOf into one object schema.
func (d *openAPIDoc) resolve(s *schema) *schema {
	for s != nil && s.Ref != "" {
		s = d.Components.Schemas[strings.TrimPrefix(s.Ref, "#/components/schemas/")]
	}
	if s == nil || len(s.AllOf) == 0 {
		return s
	}
	m := &schema{Type: "object", Properties: map[string]*schema{}}
	for _, part := range s.AllOf {
		p := d.resolve(part)
		for k, v := range p.Properties {
			m.Properties[k] = v
		}
		m.Required = append(m.Required, p.Required...)
	}
	return m
}

// validate checks v, decoded JSON, against s: types, formats, enums,
// required fields, and no field the schema does not declare.
func (d *openAPIDoc) validate(s *schema, v any, at string) []string {
	s = d.resolve(s)
	if s == nil {
		return []string{at + ": no schema"}
	}
	if v == nil {
		if s.Nullable || s.Type == "" {
			return nil
		}
		return []string{at + ": null, want " + s.Type}
	}
	var errs []string
	bad := func(format string, a ...any) { errs = append(errs, at+": "+fmt.Sprintf(format, a...)) }
	if len(s.Enum) > 0 && !slices.Contains(s.Enum, v) {
		bad("%v not in %v", v, s.Enum)
	}
	switch s.Type {
	case "object":
		o, ok := v.(map[string]any)
		if !ok {
			bad("%T, want object", v)
			break
		}
		for _, r := range s.Required {
			if _, ok := o[r]; !ok {
				bad("lacks required %q", r)
			}
		}
		for k, fv := range o {
			switch ps := s.Properties[k]; {
			case ps != nil:
				errs = append(errs, d.validate(ps, fv, at+"."+k)...)
			case s.AdditionalP != nil:
				errs = append(errs, d.validate(s.AdditionalP, fv, at+"."+k)...)
			case len(s.Properties) > 0:
				bad("undeclared field %q", k)
			}
		}
	case "array":
		a, ok := v.([]any)
		if !ok {
			bad("%T, want array", v)
			break
		}
		for i, e := range a {
			errs = append(errs, d.validate(s.Items, e, fmt.Sprintf("%s[%d]", at, i))...)
		}
	case "string":
		str, ok := v.(string)
		if !ok {
			bad("%T, want string", v)
		} else if s.Format == "date-time" {
			if _, err := time.Parse(time.RFC3339Nano, str); err != nil {
				bad("%q is not a date-time", str)
			}
		}
	case "integer", "number":
		n, ok := v.(float64)
		if !ok || (s.Type == "integer" && n != math.Trunc(n)) {
			bad("%v, want %s", v, s.Type)
		}
	case "boolean":
		if _, ok := v.(bool); !ok {
			bad("%T, want boolean", v)
		}
	}
	return errs
}

// TestServedJSONMatchesOpenAPI: what each endpoint serves is what the
// document says, field by field.
func TestServedJSONMatchesOpenAPI(t *testing.T) {
	srv, tok := fixture(t)
	d := loadOpenAPI(t)
	for path, route := range map[string]string{
		"/api/v1/sessions":       "/api/v1/sessions",
		"/api/v1/sessions/aaaa":  "/api/v1/sessions/{auditID}",
		"/api/v1/sessions/bbbb":  "/api/v1/sessions/{auditID}",
		"/api/v1/processes":      "/api/v1/processes",
		"/api/v1/alerts":         "/api/v1/alerts",
		"/api/v1/sessions?pod=x": "/api/v1/sessions",
	} {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d %s", path, resp.StatusCode, body)
		}
		var v any
		if err := json.Unmarshal(body, &v); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		s := d.Paths[route]["get"].Responses["200"].Content["application/json"].Schema
		for _, e := range d.validate(s, v, path) {
			t.Error(e)
		}
	}
}

// TestOpenAPIDeclaresTypes: each schema declares exactly the JSON fields
// of the Go type the API encodes, so neither can drift from the other.
func TestOpenAPIDeclaresTypes(t *testing.T) {
	d := loadOpenAPI(t)
	for name, v := range map[string]any{
		"UserInfo": auditlog.UserInfo{}, "ExecRequest": auditlog.ExecRecord{}, "Session": join.Session{},
		"Process": join.Process{}, "TreeNode": TreeNode{}, "Alert": store.Alert{}, "SessionView": SessionView{},
	} {
		s := d.resolve(d.Components.Schemas[name])
		if s == nil {
			t.Errorf("openapi.json lacks schema %s", name)
			continue
		}
		var declared []string
		for k := range s.Properties {
			declared = append(declared, k)
		}
		sort.Strings(declared)
		if got := jsonFields(reflect.TypeOf(v)); !slices.Equal(got, declared) {
			t.Errorf("schema %s declares %v, the Go type encodes %v", name, declared, got)
		}
	}
}

// jsonFields lists the names encoding/json gives a struct's fields.
func jsonFields(rt reflect.Type) []string {
	var out []string
	for i := range rt.NumField() {
		f := rt.Field(i)
		tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case tag == "-" || !f.IsExported() && !f.Anonymous:
		case f.Anonymous && tag == "" && f.Type.Kind() == reflect.Struct:
			out = append(out, jsonFields(f.Type)...)
		case tag != "":
			out = append(out, tag)
		default:
			out = append(out, f.Name)
		}
	}
	sort.Strings(out)
	return out
}
