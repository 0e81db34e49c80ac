// Package house checks the shape of the import graph: every package of
// the product has a layer, and imports only from layers below its own, so
// the house has no upward arrows (Go already refuses cycles).
package house

import (
	"bufio"
	"bytes"
	"fmt"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/execid/correlator/"

// layers orders the product's packages, lowest first. A new package gets a
// place here when it is made.
var layers = [][]string{
	{"pkg/vocab", "pkg/authn", "pkg/config", "pkg/meta"},
	{"pkg/capture", "pkg/bridge", "pkg/auditlog"},
	{"pkg/join", "pkg/auditlog/auditjson"},
	{"pkg/store"},
	{"pkg/store/sqlite", "pkg/store/elasticsearch", "pkg/store/storetest", "pkg/alert", "pkg/api"},
	{"pkg/alert/delivery", "pkg/agent", "pkg/cluster", "pkg/cluster/clustertest", "pkg/auditlog/ship"},
	{"pkg/render"},
	{"pkg/node"},
	{"cmd/correlator"},
}

// imports is each package of the module (tests aside) and the module's
// packages it imports, from `go list`.
func imports(t *testing.T) map[string][]string {
	t.Helper()
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", "../../...").Output()
	if err != nil {
		t.Fatalf("listing packages: %v", err)
	}
	g := map[string][]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		pkg := strings.TrimPrefix(f[0], module)
		g[pkg] = nil
		for _, imp := range f[1:] {
			if strings.HasPrefix(imp, module) {
				g[pkg] = append(g[pkg], strings.TrimPrefix(imp, module))
			}
		}
	}
	return g
}

// upward lists the arrows of g that break layers: a product package with
// no layer, one that imports the test tree, or an import from its own
// layer or above.
func upward(g map[string][]string) []string {
	rank := map[string]int{}
	for i, l := range layers {
		for _, p := range l {
			rank[p] = i
		}
	}
	var bad []string
	for pkg, deps := range g {
		r, placed := rank[pkg]
		if !placed {
			if strings.HasPrefix(pkg, "pkg/") || strings.HasPrefix(pkg, "cmd/") {
				bad = append(bad, pkg+" has no layer: give it one in layers")
			}
			continue
		}
		for _, d := range deps {
			switch dr, ok := rank[d]; {
			case strings.HasPrefix(d, "internal/") && strings.HasPrefix(pkg, "pkg/"):
				bad = append(bad, pkg+" imports "+d+": the product never imports the test tree")
			case ok && dr >= r:
				bad = append(bad, fmt.Sprintf("%s (layer %d) imports %s (layer %d)", pkg, r, d, dr))
			}
		}
	}
	return bad
}

func TestNoUpwardImports(t *testing.T) {
	g := imports(t)
	if len(g) < 20 {
		t.Fatalf("go list found %d packages", len(g))
	}
	for _, b := range upward(g) {
		t.Error(b)
	}
}

// TestUpwardCaught is the check's positive control: an upward arrow, a
// sideways one, an unplaced package and the test tree are each refused.
func TestUpwardCaught(t *testing.T) {
	for _, g := range []map[string][]string{
		{"pkg/join": {"pkg/agent"}},
		{"pkg/agent": {"pkg/cluster"}},
		{"pkg/newthing": nil},
		{"pkg/store": {"internal/testutil"}},
	} {
		if len(upward(g)) != 1 {
			t.Errorf("%v: not refused", g)
		}
	}
	if b := upward(map[string][]string{"pkg/agent": {"pkg/join", "pkg/store"}}); len(b) != 0 {
		t.Errorf("downward arrows refused: %v", b)
	}
}
