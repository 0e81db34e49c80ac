package esdouble

import (
	"encoding/json"
	"fmt"
	"net/http"
	"path"
	"slices"
	"strings"
)

// template is a composable index template.
type template struct {
	Patterns   []string
	Priority   int64
	Mappings   map[string]any
	Settings   map[string]any
	DataStream bool
	raw        map[string]any
}

// field is one mapped leaf: its type, whether it is indexed, and the source
// path its values come from (a multi-field reads its parent's).
type field struct {
	typ    string
	index  bool
	source string
}

// index is one concrete index.
type index struct {
	name     string
	fields   map[string]field
	disabled []string       // paths of enabled:false objects
	strict   bool           // dynamic: strict at the root
	mappings map[string]any // as GET _mapping answers them
	docs     map[string]*doc
	settings map[string]any
	hidden   bool
}

type doc struct {
	id      string
	seq     int64
	version int64
	raw     json.RawMessage
	src     map[string]any
}

func (d *Double) indexTemplate(r *http.Request, name string) (any, *esError) {
	switch r.Method {
	case http.MethodGet:
		t, ok := d.lockedTemplate(name)
		if !ok {
			return nil, errf(http.StatusNotFound, "resource_not_found_exception", "index template matching [%s] not found", name)
		}
		return map[string]any{"index_templates": []any{map[string]any{"name": name, "index_template": t.raw}}}, nil
	case http.MethodPut, http.MethodPost:
	default:
		return nil, badRequest("method %s on index template", r.Method)
	}
	body, e := templateBody(r, "create", "master_timeout", "cause")
	if e != nil {
		return nil, e
	}
	t := &template{raw: body}
	switch p := body["index_patterns"].(type) {
	case string:
		t.Patterns = []string{p}
	case []any:
		for _, v := range p {
			s, _ := v.(string)
			t.Patterns = append(t.Patterns, s)
		}
	}
	if len(t.Patterns) == 0 {
		return nil, errf(http.StatusBadRequest, "action_request_validation_exception", "index patterns are missing")
	}
	if c, ok := body["composed_of"].([]any); ok && len(c) > 0 {
		return nil, badRequest("the double does not implement component templates (composed_of)")
	}
	if p, ok := body["priority"].(json.Number); ok {
		t.Priority, _ = p.Int64()
	}
	if tm, ok := body["template"].(map[string]any); ok {
		if e := knownKeys("template", tm, "settings", "mappings", "aliases", "lifecycle"); e != nil {
			return nil, e
		}
		t.Mappings, _ = tm["mappings"].(map[string]any)
		t.Settings, _ = tm["settings"].(map[string]any)
		if _, err := compileMappings(t.Mappings); err != nil {
			return nil, errf(http.StatusBadRequest, "mapper_parsing_exception", "%v", err)
		}
	}
	_, t.DataStream = body["data_stream"].(map[string]any)
	d.mu.Lock()
	defer d.mu.Unlock()
	for n, o := range d.templates {
		if n != name && o.Priority == t.Priority && overlaps(o.Patterns, t.Patterns) {
			return nil, badRequest("index template [%s] has index patterns %v matching patterns from existing templates [%s] with the same priority", name, t.Patterns, n)
		}
	}
	d.templates[name] = t
	return map[string]any{"acknowledged": true}, nil
}

// templateBody reads an index template request: its parameters among
// params, its body's keys among a template's.
func templateBody(r *http.Request, params ...string) (map[string]any, *esError) {
	if e := checkParams(r, params...); e != nil {
		return nil, e
	}
	var body map[string]any
	if e := decodeBody(r, &body); e != nil {
		return nil, e
	}
	if e := knownKeys("index_template", body, "index_patterns", "priority", "template", "data_stream",
		"composed_of", "_meta", "version", "allow_auto_create"); e != nil {
		return nil, e
	}
	return body, nil
}

// simulateTemplate answers POST /_index_template/_simulate: the template
// an index matching the body's would get, or the 400 a mapping the double
// cannot compile gets (a field type it lacks). Nothing is stored.
func (d *Double) simulateTemplate(r *http.Request) (any, *esError) {
	body, e := templateBody(r, "master_timeout", "include_defaults", "create", "cause")
	if e != nil {
		return nil, e
	}
	tm, _ := body["template"].(map[string]any)
	mappings, _ := tm["mappings"].(map[string]any)
	if _, err := compileMappings(mappings); err != nil {
		return nil, errf(http.StatusBadRequest, "mapper_parsing_exception", "%v", err)
	}
	settings, _ := tm["settings"].(map[string]any)
	return map[string]any{"template": map[string]any{"mappings": cloneJSON(mappings), "settings": cloneJSON(settings),
		"aliases": map[string]any{}}, "overlapping": []any{}}, nil
}

func overlaps(a, b []string) bool {
	for _, x := range a {
		for _, y := range b {
			if x == y || wildMatch(x, strings.TrimSuffix(y, "*")) || wildMatch(y, strings.TrimSuffix(x, "*")) {
				return true
			}
		}
	}
	return false
}

func (d *Double) lockedTemplate(name string) (*template, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	t, ok := d.templates[name]
	return t, ok
}

// matchTemplate is the highest-priority template whose pattern matches name.
func (d *Double) matchTemplate(name string) *template {
	var best *template
	for _, t := range d.templates {
		for _, p := range t.Patterns {
			if wildMatch(p, name) && (best == nil || t.Priority > best.Priority) {
				best = t
			}
		}
	}
	return best
}

// wildMatch matches an index pattern with * wildcards.
func wildMatch(pattern, name string) bool {
	ok, err := path.Match(strings.ReplaceAll(pattern, "?", `\?`), name)
	return err == nil && ok
}

func newIndex(name string, t *template, body map[string]any) (*index, *esError) {
	ix := &index{name: name, fields: map[string]field{}, docs: map[string]*doc{}, settings: map[string]any{},
		mappings: map[string]any{}}
	var sources []map[string]any
	if t != nil {
		sources = append(sources, map[string]any{"mappings": t.Mappings, "settings": t.Settings})
	}
	if body != nil {
		sources = append(sources, body)
	}
	for _, s := range sources {
		m, _ := s["mappings"].(map[string]any)
		cm, err := compileMappings(m)
		if err != nil {
			return nil, errf(http.StatusBadRequest, "mapper_parsing_exception", "%v", err)
		}
		for k, v := range cm.fields {
			ix.fields[k] = v
		}
		ix.disabled = append(ix.disabled, cm.disabled...)
		ix.strict = ix.strict || cm.strict
		mergeMappings(ix.mappings, m)
		flattenSettings("", s["settings"], ix.settings)
	}
	return ix, nil
}

// flattenSettings turns {"index":{"lifecycle":{"name":x}}} into
// "index.lifecycle.name", prefixing "index." as Elasticsearch does.
func flattenSettings(prefix string, v any, out map[string]any) {
	m, ok := v.(map[string]any)
	if !ok {
		if prefix != "" {
			if !strings.HasPrefix(prefix, "index.") {
				prefix = "index." + prefix
			}
			out[prefix] = v
		}
		return
	}
	for k, sub := range m {
		p := k
		if prefix != "" {
			p = prefix + "." + k
		}
		flattenSettings(p, sub, out)
	}
}

type compiled struct {
	fields   map[string]field
	disabled []string
	strict   bool
}

var leafTypes = []string{"keyword", "wildcard", "constant_keyword", "text", "match_only_text", "long",
	"integer", "short", "byte", "double", "float", "half_float", "scaled_float", "unsigned_long",
	"boolean", "date", "date_nanos", "ip", "binary", "flattened"}

func compileMappings(m map[string]any) (compiled, error) {
	c := compiled{fields: map[string]field{}}
	if m == nil {
		return c, nil
	}
	for k := range m {
		if !slices.Contains([]string{"properties", "dynamic", "_source", "_meta", "dynamic_templates", "date_detection"}, k) {
			return c, fmt.Errorf("root mapping definition has unsupported parameters: [%s]", k)
		}
	}
	c.strict = m["dynamic"] == "strict"
	props, _ := m["properties"].(map[string]any)
	err := c.walk("", props)
	return c, err
}

func (c *compiled) walk(prefix string, props map[string]any) error {
	for name, v := range props {
		def, ok := v.(map[string]any)
		if !ok {
			return fmt.Errorf("expected map for property [%s]", name)
		}
		p := name
		if prefix != "" {
			p = prefix + "." + name
		}
		typ, _ := def["type"].(string)
		if typ == "" || typ == "object" || typ == "nested" {
			if en, ok := def["enabled"].(bool); ok && !en {
				c.disabled = append(c.disabled, p)
				continue
			}
			sub, _ := def["properties"].(map[string]any)
			if err := c.walk(p, sub); err != nil {
				return err
			}
			continue
		}
		if !slices.Contains(leafTypes, typ) {
			return fmt.Errorf("no handler for type [%s] declared on field [%s]", typ, p)
		}
		f := field{typ: typ, index: true, source: p}
		if idx, ok := def["index"].(bool); ok {
			f.index = idx
		}
		c.fields[p] = f
		if mf, ok := def["fields"].(map[string]any); ok {
			for sub, sv := range mf {
				sd, _ := sv.(map[string]any)
				st, _ := sd["type"].(string)
				if !slices.Contains(leafTypes, st) {
					return fmt.Errorf("no handler for type [%s] declared on field [%s.%s]", st, p, sub)
				}
				c.fields[p+"."+sub] = field{typ: st, index: true, source: p}
			}
		}
	}
	return nil
}

func (d *Double) createIndex(r *http.Request, name string) (any, *esError) {
	if e := checkParams(r, "wait_for_active_shards", "master_timeout", "timeout"); e != nil {
		return nil, e
	}
	var body map[string]any
	if r.ContentLength != 0 {
		if e := decodeBody(r, &body); e != nil {
			return nil, e
		}
	}
	if e := knownKeys("create_index", body, "settings", "mappings", "aliases"); e != nil {
		return nil, e
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.indices[name]; ok {
		return nil, errf(http.StatusBadRequest, "resource_already_exists_exception", "index [%s/xyz] already exists", name)
	}
	if _, ok := d.dataStreams[name]; ok {
		return nil, errf(http.StatusBadRequest, "resource_already_exists_exception", "data stream [%s] already exists", name)
	}
	if name != strings.ToLower(name) || strings.ContainsAny(name, `\/*?"<>| ,#:`) {
		return nil, errf(http.StatusBadRequest, "invalid_index_name_exception", "Invalid index name [%s]", name)
	}
	t := d.matchTemplate(name)
	if t != nil && t.DataStream {
		return nil, badRequest("cannot create index with name [%s], because it matches with template that creates data streams only", name)
	}
	ix, e := newIndex(name, t, body)
	if e != nil {
		return nil, e
	}
	d.indices[name] = ix
	return map[string]any{"acknowledged": true, "shards_acknowledged": true, "index": name}, nil
}

func (d *Double) deleteIndex(r *http.Request, name string) (any, *esError) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.indices[name]; !ok {
		return nil, errf(http.StatusNotFound, "index_not_found_exception", "no such index [%s]", name)
	}
	delete(d.indices, name)
	return map[string]any{"acknowledged": true}, nil
}

// concrete resolves one index or data stream name; nil if none.
func (d *Double) concrete(name string) *index {
	if b, ok := d.dataStreams[name]; ok {
		return d.indices[b]
	}
	return d.indices[name]
}

// resolve expands a comma-separated target with wildcards to concrete
// indices. A missing concrete name is index_not_found_exception; a
// wildcard matching nothing is an empty list (allow_no_indices).
func (d *Double) resolve(target string) ([]*index, *esError) {
	var out []*index
	seen := map[string]bool{}
	add := func(ix *index) {
		if ix != nil && !seen[ix.name] {
			seen[ix.name] = true
			out = append(out, ix)
		}
	}
	for _, t := range strings.Split(target, ",") {
		switch {
		case t == "_all" || t == "*":
			for _, ix := range d.indices {
				if !ix.hidden {
					add(ix)
				}
			}
			for _, b := range d.dataStreams {
				add(d.indices[b])
			}
		case strings.Contains(t, "*"):
			for n, ix := range d.indices {
				if wildMatch(t, n) && (!ix.hidden || strings.HasPrefix(t, ".")) {
					add(ix)
				}
			}
			for n, b := range d.dataStreams {
				if wildMatch(t, n) {
					add(d.indices[b])
				}
			}
		default:
			ix := d.concrete(t)
			if ix == nil {
				return nil, errf(http.StatusNotFound, "index_not_found_exception", "no such index [%s]", t)
			}
			add(ix)
		}
	}
	slices.SortFunc(out, func(a, b *index) int { return strings.Compare(a.name, b.name) })
	return out, nil
}
