package testutil

import "testing"

func TestUnescapeMount(t *testing.T) {
	for in, want := range map[string]string{
		`/a/b`:         "/a/b",
		`/a\040b`:      "/a b",
		`/a\134b`:      `/a\b`,
		`/trailing\04`: `/trailing\04`,
		`/x\011y\012z`: "/x\ty\nz",
	} {
		if got := unescapeMount(in); got != want {
			t.Errorf("unescapeMount(%q) = %q, want %q", in, got, want)
		}
	}
}
