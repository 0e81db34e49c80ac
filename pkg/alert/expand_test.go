package alert

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// mapping resolves like Kubernetes' MappingFuncFor: known names to values,
// unknown ones to themselves, verbatim.
func testMapping(vars map[string]string) func(string) string {
	return func(name string) string {
		if v, ok := vars[name]; ok {
			return v
		}
		return syntaxWrap(name)
	}
}

// The cases mirror k8s.io/kubernetes third_party/forked/golang/expansion's
// TestMapReference/TestExpand table (the ones that apply to one string).
func TestExpand(t *testing.T) {
	vars := map[string]string{
		"VAR_A": "A", "VAR_B": "B", "VAR_C": "C", "VAR_REF": "$(VAR_A)",
		"VAR_EMPTY": "", "": "empty-name",
	}
	for _, tc := range []struct{ in, want string }{
		{"$(VAR_A)", "A"},
		{"___$(VAR_B)___", "___B___"},
		{"$(VAR_A)-$(VAR_A)", "A-A"},
		{"f000-$$VAR_A", "f000-$VAR_A"},
		{"foo\\$(VAR_C)bar", "foo\\Cbar"},
		{"foo\\\\$(VAR_C)bar", "foo\\\\Cbar"},
		{"foo\\\\\\\\$(VAR_A)bar", "foo\\\\\\\\Abar"},
		{"$(VAR_A)$(VAR_B)", "AB"},
		{"$(VAR_A)$(VAR_B)$(VAR_C)", "ABC"},
		{"foo$(VAR_C)bar", "fooCbar"},
		{"foo$(VAR_A)$(VAR_B)bar", "fooABbar"},
		{"foo$(VAR_A)$(VAR_B)$(VAR_C)bar", "fooABCbar"},
		{"$(VAR_A)-$(VAR_B)-$(VAR_C)", "A-B-C"},
		{"$(VAR_REF)", "$(VAR_A)"}, // a value is never expanded again
		{"$(VAR_EMPTY)", ""},
		{"$()", "empty-name"},
		{"$(UNKNOWN)", "$(UNKNOWN)"},
		{"foo$(UNKNOWN)bar", "foo$(UNKNOWN)bar"},
		{"$$(VAR_A)", "$(VAR_A)"},
		{"$$$(VAR_A)", "$A"},
		{"$$$$(VAR_A)", "$$(VAR_A)"},
		{"$$", "$"},
		{"$$$", "$$"},
		{"$", "$"},
		{"foo$", "foo$"},
		{"$VAR_A", "$VAR_A"},
		{"$(VAR_A", "$(VAR_A"},
		{"foo$(VAR_A", "foo$(VAR_A"},
		{"$(", "$("},
		{"$((VAR_A))", "$((VAR_A))"}, // name "(VAR_A" is unknown; the second ) is literal
		{"$(VAR_A$(VAR_B))", "$(VAR_A$(VAR_B))"},
		{"$(VAR_A))", "A)"},
		{"(VAR_A)", "(VAR_A)"},
		{"$$(VAR_A", "$(VAR_A"},
		{"$(VAR_A)$", "A$"},
		{"", ""},
		{"no refs", "no refs"},
		{"$é", "$é"}, // Kubernetes would emit "$Ã\xa9" here; see Expand
	} {
		if got := Expand(tc.in, testMapping(vars)); got != tc.want {
			t.Errorf("Expand(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestReferences(t *testing.T) {
	got := strings.Join(references("$(a) $$(b) $(c d) $(e"), ",")
	if got != "a,c d" {
		t.Errorf("references = %q", got)
	}
}

// FuzzExpand checks invariants that hold for every input: text without a
// $ is unchanged; with an identity mapping (unknown = verbatim) the output
// is the input with each $$ collapsed; valid UTF-8 stays valid; values are
// inserted, never expanded.
func FuzzExpand(f *testing.F) {
	for _, s := range []string{"$(a)", "$$(a)", "$(a", "$", "$$$", "x$(y)z$(", "$é", "$(v)"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !strings.Contains(s, "$") {
			if got := Expand(s, testMapping(nil)); got != s {
				t.Fatalf("no $ but changed: %q -> %q", s, got)
			}
		}
		if got, want := Expand(s, testMapping(nil)), collapseDollars(s); got != want {
			t.Fatalf("identity Expand(%q) = %q, want %q", s, got, want)
		}
		if utf8.ValidString(s) && !utf8.ValidString(Expand(s, testMapping(nil))) {
			t.Fatalf("Expand(%q) broke UTF-8", s)
		}
		// A value containing a reference is inserted as is: the mapping
		// never sees a name that only the value contains.
		if !strings.Contains(s, "\x01") {
			Expand(s, func(name string) string {
				if strings.Contains(name, "\x01") {
					t.Fatalf("value expanded again: name %q", name)
				}
				return "$(\x01)"
			})
		}
	})
}

// collapseDollars is an independent model of Expand with unknown names
// kept verbatim: scanning left to right, $$ becomes $, and anything else
// is copied.
func collapseDollars(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '$' && i+1 < len(s) && s[i+1] == '$' {
			b.WriteByte('$')
			i++
			continue
		}
		if s[i] == '$' && i+1 < len(s) && s[i+1] == '(' {
			if j := strings.IndexByte(s[i+2:], ')'); j >= 0 {
				b.WriteString(s[i : i+2+j+1]) // $(name) verbatim
				i += 2 + j
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
