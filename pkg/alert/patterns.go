package alert

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// Patterns matches a string against globs and regular expressions; any one
// matching is a match. In YAML it is a string (one glob), a list of globs,
// or {glob: [...], regex: [...]}.
type Patterns struct {
	Glob  []string `json:"glob,omitempty"`
	Regex []string `json:"regex,omitempty"`

	compiled []*regexp.Regexp
}

// UnmarshalJSON accepts the three YAML shapes (sigs.k8s.io/yaml goes
// through JSON).
func (p *Patterns) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	switch {
	case len(b) > 0 && b[0] == '"':
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		p.Glob = []string{s}
		return nil
	case len(b) > 0 && b[0] == '[':
		return json.Unmarshal(b, &p.Glob)
	case len(b) > 0 && b[0] == '{':
		type plain Patterns
		var q plain
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&q); err != nil {
			return err
		}
		p.Glob, p.Regex = q.Glob, q.Regex
		return nil
	}
	return errors.New("want a glob, a list of globs, or {glob, regex}")
}

// compile builds the matchers; errors name the bad pattern.
func (p *Patterns) compile() error {
	if p == nil {
		return nil
	}
	if len(p.Glob)+len(p.Regex) == 0 {
		return errors.New("no patterns")
	}
	p.compiled = p.compiled[:0]
	for _, g := range p.Glob {
		re, err := regexp.Compile(globToRegexp(g))
		if err != nil {
			return fmt.Errorf("compiling glob %q: %w", g, err)
		}
		p.compiled = append(p.compiled, re)
	}
	for _, r := range p.Regex {
		re, err := regexp.Compile(r)
		if err != nil {
			return fmt.Errorf("compiling regex %q: %w", r, err)
		}
		p.compiled = append(p.compiled, re)
	}
	return nil
}

// match reports whether s matches any pattern.
func (p *Patterns) match(s string) bool {
	for _, re := range p.compiled {
		if re.MatchString(s) {
			return true
		}
	}
	return false
}

// globToRegexp turns a glob into an anchored RE2 expression: * is any run
// of characters (/ and newlines included), ? is one character, \x is a
// literal x; everything else is literal.
func globToRegexp(g string) string {
	var b strings.Builder
	b.WriteString(`(?s)\A`)
	for i := 0; i < len(g); i++ {
		switch c := g[i]; c {
		case '*':
			b.WriteString(`.*`)
		case '?':
			b.WriteString(`.`)
		case '\\':
			if i+1 < len(g) {
				i++
				b.WriteString(regexp.QuoteMeta(g[i : i+1]))
			} else {
				b.WriteString(`\\`)
			}
		default:
			b.WriteString(regexp.QuoteMeta(g[i : i+1]))
		}
	}
	b.WriteString(`\z`)
	return b.String()
}
