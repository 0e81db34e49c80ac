package esdouble

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// values collects the non-null leaf values at a dotted path, reading both
// nested objects and dotted keys and flattening arrays, as Elasticsearch
// does when it indexes a document.
func values(v any, path string) []any {
	if path == "" {
		switch x := v.(type) {
		case nil:
			return nil
		case []any:
			var out []any
			for _, e := range x {
				out = append(out, values(e, "")...)
			}
			return out
		}
		return []any{v}
	}
	switch x := v.(type) {
	case map[string]any:
		var out []any
		for i := 0; i <= len(path); i++ {
			if i < len(path) && path[i] != '.' {
				continue
			}
			if sub, ok := x[path[:i]]; ok {
				rest := ""
				if i < len(path) {
					rest = path[i+1:]
				}
				out = append(out, values(sub, rest)...)
			}
		}
		return out
	case []any:
		var out []any
		for _, e := range x {
			out = append(out, values(e, path)...)
		}
		return out
	}
	return nil
}

// leaves walks a source document's leaf paths, skipping disabled objects.
func leaves(prefix string, v any, disabled []string, fn func(path string, v any)) {
	for _, dp := range disabled {
		if prefix == dp {
			return
		}
	}
	switch x := v.(type) {
	case map[string]any:
		for k, sub := range x {
			p := k
			if prefix != "" {
				p = prefix + "." + k
			}
			leaves(p, sub, disabled, fn)
		}
	case []any:
		for _, e := range x {
			leaves(prefix, e, disabled, fn)
		}
	case nil:
	default:
		fn(prefix, x)
	}
}

// admit validates a document against the index's mappings and maps new
// fields dynamically (strings become text with a keyword sub-field, as in
// Elasticsearch's default dynamic mapping). The error is what Elasticsearch
// would put in the bulk item.
func (ix *index) admit(src map[string]any) *esError {
	var bad *esError
	newFields := map[string]field{}
	leaves("", src, ix.disabled, func(p string, v any) {
		if bad != nil {
			return
		}
		f, ok := ix.fields[p]
		if !ok {
			if nf, ok := newFields[p]; ok {
				f = nf
			} else if ix.strict {
				bad = errf(400, "strict_dynamic_mapping_exception", "[1:1] mapping set to strict, dynamic introduction of [%s] within [_doc] is not allowed", p)
				return
			} else {
				f = dynamicField(p, v)
				newFields[p] = f
				if f.typ == "text" {
					newFields[p+".keyword"] = field{typ: "keyword", index: true, source: p}
				}
				return
			}
		}
		if err := checkValue(f, v); err != nil {
			bad = errf(400, "document_parsing_exception", "[1:1] failed to parse field [%s] of type [%s] in document: %v", p, f.typ, err)
		}
	})
	if bad != nil {
		return bad
	}
	for k, v := range newFields {
		ix.fields[k] = v
	}
	return nil
}

func dynamicField(p string, v any) field {
	switch x := v.(type) {
	case bool:
		return field{typ: "boolean", index: true, source: p}
	case json.Number:
		if _, err := x.Int64(); err == nil {
			return field{typ: "long", index: true, source: p}
		}
		return field{typ: "float", index: true, source: p}
	}
	return field{typ: "text", index: true, source: p}
}

func checkValue(f field, v any) error {
	switch f.typ {
	case "keyword", "wildcard", "constant_keyword":
		s := fmt.Sprint(v)
		if f.typ == "keyword" && f.index && len(s) > 32766 {
			return fmt.Errorf("Document contains at least one immense term in field=\"%s\"", f.source)
		}
		if !utf8.ValidString(s) {
			return fmt.Errorf("invalid UTF-8")
		}
	case "long", "integer", "short", "byte", "unsigned_long":
		n, err := toFloat(v)
		if err != nil || n != math.Trunc(n) {
			return fmt.Errorf("For input string: \"%v\"", v)
		}
	case "double", "float", "half_float", "scaled_float":
		if _, err := toFloat(v); err != nil {
			return fmt.Errorf("For input string: \"%v\"", v)
		}
	case "boolean":
		if _, err := toBool(v); err != nil {
			return err
		}
	case "date", "date_nanos":
		t, err := toTime(v, f.typ)
		if err != nil {
			return err
		}
		if f.typ == "date_nanos" && t < 0 {
			return fmt.Errorf("date[%v] is before the epoch in 1970 and cannot be stored in nanosecond resolution", v)
		}
	}
	return nil
}

func toFloat(v any) (float64, error) {
	switch x := v.(type) {
	case json.Number:
		return x.Float64()
	case string:
		return strconv.ParseFloat(x, 64)
	case float64:
		return x, nil
	case int64:
		return float64(x), nil
	}
	return 0, fmt.Errorf("not a number: %v", v)
}

func toBool(v any) (bool, error) {
	switch x := v.(type) {
	case bool:
		return x, nil
	case string:
		switch x {
		case "true":
			return true, nil
		case "false", "":
			return false, nil
		}
	}
	return false, fmt.Errorf("Failed to parse value [%v] as only [true] or [false] are allowed.", v)
}

// toTime reads a date as nanoseconds since the epoch: a
// strict_date_optional_time string, or a number of epoch milliseconds.
func toTime(v any, typ string) (int64, error) {
	switch x := v.(type) {
	case json.Number:
		if ms, err := x.Int64(); err == nil {
			return ms * int64(time.Millisecond), nil
		}
		f, err := x.Float64()
		if err != nil {
			return 0, err
		}
		return int64(f * float64(time.Millisecond)), nil
	case float64:
		return int64(x * float64(time.Millisecond)), nil
	case int64:
		return x * int64(time.Millisecond), nil
	case string:
		for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05.999999999", "2006-01-02"} {
			if t, err := time.Parse(layout, x); err == nil {
				n := t.UnixNano()
				if typ == "date" {
					n = n / int64(time.Millisecond) * int64(time.Millisecond)
				}
				return n, nil
			}
		}
		return 0, fmt.Errorf("failed to parse date field [%s] with format [strict_date_optional_time||epoch_millis]", x)
	}
	return 0, fmt.Errorf("cannot parse date from %T", v)
}

// sortKey is a comparable form of one value of a mapped field.
type sortKey struct {
	missing bool
	num     float64
	i       int64
	str     string
	kind    byte // 'n' float, 'i' int64, 's' string
}

// keyOf converts a doc value (or a query value) to the field type's
// comparable form.
func keyOf(f field, v any) (sortKey, error) {
	switch f.typ {
	case "date", "date_nanos":
		n, err := toTime(v, f.typ)
		return sortKey{i: n, kind: 'i'}, err
	case "long", "integer", "short", "byte", "unsigned_long":
		if n, ok := v.(json.Number); ok {
			if i, err := n.Int64(); err == nil {
				return sortKey{i: i, kind: 'i'}, nil
			}
		}
		x, err := toFloat(v)
		return sortKey{i: int64(x), kind: 'i'}, err
	case "double", "float", "half_float", "scaled_float":
		x, err := toFloat(v)
		return sortKey{num: x, kind: 'n'}, err
	case "boolean":
		b, err := toBool(v)
		if b {
			return sortKey{i: 1, kind: 'i'}, err
		}
		return sortKey{i: 0, kind: 'i'}, err
	}
	return sortKey{str: fmt.Sprint(v), kind: 's'}, nil
}

func (a sortKey) cmp(b sortKey) int {
	switch {
	case a.missing && b.missing:
		return 0
	case a.missing:
		return 1
	case b.missing:
		return -1
	}
	switch a.kind {
	case 'i':
		return cmpOrdered(a.i, b.i)
	case 'n':
		return cmpOrdered(a.num, b.num)
	}
	return strings.Compare(a.str, b.str)
}

func cmpOrdered[T int64 | float64](a, b T) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// wire is the sort value Elasticsearch returns for a key: epoch millis for
// date, epoch nanos for date_nanos, numbers, strings.
func (a sortKey) wire(f field) any {
	if a.missing {
		return nil
	}
	switch {
	case f.typ == "date":
		return a.i / int64(time.Millisecond)
	case a.kind == 'i':
		return a.i
	case a.kind == 'n':
		return a.num
	}
	return a.str
}

// fromWire reads a search_after value back; dates are in the units wire
// gives them.
func fromWire(f field, v any) (sortKey, error) {
	if v == nil {
		return sortKey{missing: true}, nil
	}
	if f.typ == "date_nanos" {
		if n, ok := v.(json.Number); ok {
			i, err := n.Int64()
			return sortKey{i: i, kind: 'i'}, err
		}
	}
	return keyOf(f, v)
}
