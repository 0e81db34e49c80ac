package esdouble

import (
	"regexp"
	"strings"
)

// matcher decides whether a document matches a compiled query.
type matcher func(*doc) bool

// compileQuery compiles the query DSL subset the double knows against one
// index's mappings. Anything else is a 400 parsing_exception.
func (ix *index) compileQuery(q any) (matcher, *esError) {
	if q == nil {
		return func(*doc) bool { return true }, nil
	}
	obj, ok := q.(map[string]any)
	if !ok || len(obj) != 1 {
		return nil, parsingError("[_na] query malformed, must start with start_object and have one clause")
	}
	for name, body := range obj {
		switch name {
		case "match_all":
			return func(*doc) bool { return true }, nil
		case "match_none":
			return func(*doc) bool { return false }, nil
		case "bool":
			return ix.compileBool(body)
		case "term":
			return ix.compileTerm(body)
		case "terms":
			return ix.compileTerms(body)
		case "range":
			return ix.compileRange(body)
		case "wildcard":
			return ix.compileWildcard(body)
		case "exists":
			return ix.compileExists(body)
		case "ids":
			return compileIDs(body)
		default:
			return nil, parsingError("unknown query [%s]", name)
		}
	}
	panic("unreachable")
}

func clauses(v any) []any {
	if a, ok := v.([]any); ok {
		return a
	}
	if v == nil {
		return nil
	}
	return []any{v}
}

func (ix *index) compileBool(body any) (matcher, *esError) {
	obj, ok := body.(map[string]any)
	if !ok {
		return nil, parsingError("[bool] query malformed")
	}
	if e := knownKeys("bool", obj, "filter", "must", "must_not", "should", "minimum_should_match", "boost"); e != nil {
		return nil, e
	}
	var must, not, should []matcher
	for _, key := range []string{"filter", "must", "must_not", "should"} {
		for _, c := range clauses(obj[key]) {
			m, e := ix.compileQuery(c)
			if e != nil {
				return nil, e
			}
			switch key {
			case "must_not":
				not = append(not, m)
			case "should":
				should = append(should, m)
			default:
				must = append(must, m)
			}
		}
	}
	minShould := 0
	if len(should) > 0 && len(must) == 0 {
		minShould = 1
	}
	if v, ok := obj["minimum_should_match"]; ok {
		n, err := toFloat(v)
		if err != nil {
			return nil, parsingError("the double reads minimum_should_match only as an integer")
		}
		minShould = int(n)
	}
	return func(d *doc) bool {
		for _, m := range must {
			if !m(d) {
				return false
			}
		}
		for _, m := range not {
			if m(d) {
				return false
			}
		}
		n := 0
		for _, m := range should {
			if m(d) {
				n++
			}
		}
		return n >= minShould
	}, nil
}

// single reads {field: value} or {field: {key: value, ...}}.
func single(kind string, body any) (string, any, *esError) {
	obj, ok := body.(map[string]any)
	if !ok || len(obj) != 1 {
		return "", nil, parsingError("[%s] query doesn't support multiple fields", kind)
	}
	for f, v := range obj {
		return f, v, nil
	}
	panic("unreachable")
}

// searchable is the mapped field for a query, or ok=false for an unmapped
// one (which matches nothing, as in Elasticsearch).
func (ix *index) searchable(kind, name string) (field, bool, *esError) {
	f, ok := ix.fields[name]
	if !ok {
		return field{}, false, nil
	}
	if !f.index {
		return f, false, badRequest("Cannot search on field [%s] since it is not indexed.", name)
	}
	if (f.typ == "text" || f.typ == "match_only_text") && kind != "exists" {
		return f, false, badRequest("the double does not analyse text: [%s] query on text field [%s]; map it as keyword", kind, name)
	}
	return f, true, nil
}

// anyValue is true if one of the document's values for f satisfies ok.
func anyValue(d *doc, f field, ok func(sortKey) bool) bool {
	for _, v := range values(d.src, f.source) {
		k, err := keyOf(f, v)
		if err == nil && ok(k) {
			return true
		}
	}
	return false
}

func (ix *index) compileTerm(body any) (matcher, *esError) {
	name, v, e := single("term", body)
	if e != nil {
		return nil, e
	}
	if obj, ok := v.(map[string]any); ok {
		if e := knownKeys("term", obj, "value", "boost", "case_insensitive"); e != nil {
			return nil, e
		}
		v = obj["value"]
	}
	if _, isObj := v.(map[string]any); isObj || v == nil {
		return nil, parsingError("[term] query does not support a null or object value")
	}
	f, ok, e := ix.searchable("term", name)
	if e != nil || !ok {
		return func(*doc) bool { return false }, e
	}
	want, err := keyOf(f, v)
	if err != nil {
		return nil, badRequest("failed to parse term value [%v] for field [%s]: %v", v, name, err)
	}
	return func(d *doc) bool { return anyValue(d, f, func(k sortKey) bool { return k.cmp(want) == 0 }) }, nil
}

func (ix *index) compileTerms(body any) (matcher, *esError) {
	obj, ok := body.(map[string]any)
	if !ok {
		return nil, parsingError("[terms] query malformed")
	}
	var name string
	var list []any
	for k, v := range obj {
		if k == "boost" {
			continue
		}
		if name != "" {
			return nil, parsingError("[terms] query does not support multiple fields")
		}
		name = k
		arr, isArr := v.([]any)
		if !isArr {
			return nil, parsingError("the double does not implement terms lookup; [terms] on [%s] needs an array", k)
		}
		list = arr
	}
	if len(list) > 65536 {
		return nil, badRequest("The number of terms [%d] used in the Terms Query request has exceeded the allowed maximum of [65536].", len(list))
	}
	f, ok, e := ix.searchable("terms", name)
	if e != nil || !ok {
		return func(*doc) bool { return false }, e
	}
	want := map[sortKey]bool{}
	for _, v := range list {
		k, err := keyOf(f, v)
		if err != nil {
			return nil, badRequest("failed to parse term [%v] for field [%s]", v, name)
		}
		want[k] = true
	}
	return func(d *doc) bool { return anyValue(d, f, func(k sortKey) bool { return want[k] }) }, nil
}

func (ix *index) compileRange(body any) (matcher, *esError) {
	name, v, e := single("range", body)
	if e != nil {
		return nil, e
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, parsingError("[range] query malformed, no start_object after query name")
	}
	if e := knownKeys("range", obj, "gte", "gt", "lte", "lt", "format", "boost"); e != nil {
		return nil, e
	}
	if fm, ok := obj["format"].(string); ok && fm != "strict_date_optional_time_nanos" && fm != "strict_date_optional_time" && fm != "epoch_millis" {
		return nil, parsingError("the double does not know date format [%s]", fm)
	}
	f, ok, e := ix.searchable("range", name)
	if e != nil || !ok {
		return func(*doc) bool { return false }, e
	}
	type bound struct {
		k    sortKey
		test func(int) bool
	}
	var bounds []bound
	for op, test := range map[string]func(int) bool{
		"gte": func(c int) bool { return c >= 0 }, "gt": func(c int) bool { return c > 0 },
		"lte": func(c int) bool { return c <= 0 }, "lt": func(c int) bool { return c < 0 },
	} {
		bv, ok := obj[op]
		if !ok || bv == nil {
			continue
		}
		k, err := keyOf(f, bv)
		if err != nil {
			return nil, badRequest("failed to parse [%v] for range on [%s]: %v", bv, name, err)
		}
		bounds = append(bounds, bound{k, test})
	}
	return func(d *doc) bool {
		return anyValue(d, f, func(k sortKey) bool {
			for _, b := range bounds {
				if !b.test(k.cmp(b.k)) {
					return false
				}
			}
			return true
		})
	}, nil
}

func (ix *index) compileWildcard(body any) (matcher, *esError) {
	name, v, e := single("wildcard", body)
	if e != nil {
		return nil, e
	}
	ci := false
	if obj, ok := v.(map[string]any); ok {
		if e := knownKeys("wildcard", obj, "value", "wildcard", "case_insensitive", "boost", "rewrite"); e != nil {
			return nil, e
		}
		v = obj["value"]
		if v == nil {
			v = obj["wildcard"]
		}
		ci, _ = obj["case_insensitive"].(bool)
	}
	pat, ok := v.(string)
	if !ok {
		return nil, parsingError("[wildcard] query needs a string value")
	}
	f, ok, e := ix.searchable("wildcard", name)
	if e != nil || !ok {
		return func(*doc) bool { return false }, e
	}
	switch f.typ {
	case "keyword", "wildcard", "constant_keyword":
	default:
		return nil, badRequest("Can only use wildcard queries on keyword and text fields - not on [%s] which is of type [%s]", name, f.typ)
	}
	re := wildcardRegexp(pat, ci)
	return func(d *doc) bool {
		return anyValue(d, f, func(k sortKey) bool { return re.MatchString(k.str) })
	}, nil
}

// wildcardRegexp translates Lucene wildcard syntax: * any run, ? any one
// character, backslash escapes the next character.
func wildcardRegexp(pat string, ci bool) *regexp.Regexp {
	var b strings.Builder
	b.WriteString(`^`)
	if ci {
		b.WriteString(`(?i)`)
	}
	b.WriteString(`(?s)`)
	rs := []rune(pat)
	for i := 0; i < len(rs); i++ {
		switch c := rs[i]; c {
		case '*':
			b.WriteString(`.*`)
		case '?':
			b.WriteString(`.`)
		case '\\':
			if i+1 < len(rs) {
				i++
				b.WriteString(regexp.QuoteMeta(string(rs[i])))
			}
		default:
			b.WriteString(regexp.QuoteMeta(string(c)))
		}
	}
	b.WriteString(`$`)
	return regexp.MustCompile(b.String())
}

func (ix *index) compileExists(body any) (matcher, *esError) {
	obj, ok := body.(map[string]any)
	if !ok {
		return nil, parsingError("[exists] query malformed")
	}
	if e := knownKeys("exists", obj, "field", "boost"); e != nil {
		return nil, e
	}
	name, _ := obj["field"].(string)
	if name == "" {
		return nil, parsingError("[exists] must be provided with a [field]")
	}
	f, ok := ix.fields[name]
	if !ok {
		return func(*doc) bool { return false }, nil
	}
	return func(d *doc) bool { return len(values(d.src, f.source)) > 0 }, nil
}

func compileIDs(body any) (matcher, *esError) {
	obj, ok := body.(map[string]any)
	if !ok {
		return nil, parsingError("[ids] query malformed")
	}
	if e := knownKeys("ids", obj, "values", "boost"); e != nil {
		return nil, e
	}
	want := map[string]bool{}
	for _, v := range clauses(obj["values"]) {
		s, _ := v.(string)
		want[s] = true
	}
	return func(d *doc) bool { return want[d.id] }, nil
}
