package deploy

import (
	"encoding/json"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// codeMetrics is every metric name pkg/ defines, from its source.
func codeMetrics(t *testing.T) map[string]bool {
	t.Helper()
	re := regexp.MustCompile(`"(correlator_[a-z0-9_]+)"`)
	out := map[string]bool{}
	err := filepath.WalkDir("../pkg", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return err
		}
		b, err := os.ReadFile(p)
		for _, m := range re.FindAllSubmatch(b, -1) {
			out[string(m[1])] = true
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) < 10 {
		t.Fatalf("found only %d metrics in pkg/: %v", len(out), out)
	}
	return out
}

type grafanaPanel struct {
	Type    string `json:"type"`
	Title   string `json:"title"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
	Panels []grafanaPanel `json:"panels"`
}

// TestGrafanaDashboard: the dashboard is valid JSON, queries only metrics
// the agent exports, and shows every metric pkg/ defines.
func TestGrafanaDashboard(t *testing.T) {
	var dash struct {
		UID    string         `json:"uid"`
		Title  string         `json:"title"`
		Panels []grafanaPanel `json:"panels"`
	}
	if err := json.Unmarshal(readFile(t, "../docs/grafana/correlator.json"), &dash); err != nil {
		t.Fatalf("docs/grafana/correlator.json: %v", err)
	}
	if dash.UID == "" || dash.Title == "" {
		t.Error("dashboard needs a uid and a title")
	}
	defined := codeMetrics(t)
	run := string(readFile(t, "../pkg/node/node.go"))
	std := map[string]bool{ // the standard collectors the node agent registers
		"go_":      strings.Contains(run, "collectors.NewGoCollector"),
		"process_": strings.Contains(run, "collectors.NewProcessCollector"),
	}
	name := regexp.MustCompile(`\b((?:correlator|go|process)_[a-z0-9_]+)\b`)
	used := map[string]bool{}
	var walk func([]grafanaPanel)
	walk = func(ps []grafanaPanel) {
		for _, p := range ps {
			walk(p.Panels)
			for _, tg := range p.Targets {
				ms := name.FindAllString(tg.Expr, -1)
				if len(ms) == 0 {
					t.Errorf("panel %q: query %q names no metric", p.Title, tg.Expr)
				}
				for _, m := range ms {
					base := m
					for _, suf := range []string{"_bucket", "_sum", "_count"} {
						if b, ok := strings.CutSuffix(m, suf); ok && defined[b] {
							base = b
						}
					}
					used[base] = true
					switch {
					case defined[base]:
					case strings.HasPrefix(m, "go_") && std["go_"], strings.HasPrefix(m, "process_") && std["process_"]:
					default:
						t.Errorf("panel %q queries %s, which the agent does not export", p.Title, m)
					}
				}
			}
		}
	}
	walk(dash.Panels)
	for m := range defined {
		if !used[m] {
			t.Errorf("metric %s is on no dashboard panel (docs/grafana/correlator.json)", m)
		}
	}
}

// codeFlags is every process/session flag value pkg/join, pkg/capture and
// pkg/auditlog define (Flag* string constants).
func codeFlags(t *testing.T) []string {
	t.Helper()
	re := regexp.MustCompile(`\bFlag[A-Za-z]+\s*=\s*"([a-z_]+)"`)
	seen := map[string]bool{}
	for _, dir := range []string{"../pkg/vocab"} {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			for _, m := range re.FindAllSubmatch(readFile(t, f), -1) {
				seen[string(m[1])] = true
			}
		}
	}
	out := slices.Sorted(func(yield func(string) bool) {
		for k := range seen {
			if !yield(k) {
				return
			}
		}
	})
	if len(out) < 10 {
		t.Fatalf("found only %d flags: %v", len(out), out)
	}
	return out
}

// TestRunbookFlags: the runbook explains every flag a process or session
// can carry, and every attribution.
func TestRunbookFlags(t *testing.T) {
	rb := string(readFile(t, "../docs/runbook.md"))
	for _, f := range append(codeFlags(t), "audit_id", "inherited", "heuristic", "ambiguous", "procfs") {
		if !strings.Contains(rb, "| `"+f+"` |") {
			t.Errorf("docs/runbook.md has no table row for `%s`", f)
		}
	}
}

// TestDocCommands runs `correlator <subcommand> --help` for every
// correlator command line in the docs' shell blocks and checks that each
// subcommand and flag it uses exists.
func TestDocCommands(t *testing.T) {
	bin := correlatorBin(t)
	helps := map[string]string{}
	help := func(sub []string) string {
		k := strings.Join(sub, " ")
		if h, ok := helps[k]; ok {
			return h
		}
		out, err := exec.Command(bin, append(sub, "--help")...).CombinedOutput()
		if err != nil {
			t.Fatalf("correlator %s --help: %v\n%s", k, err, out)
		}
		helps[k] = string(out)
		return helps[k]
	}
	flagRe := regexp.MustCompile(`(?:^|\s)(--[a-z][a-z0-9-]*|-[a-z])\b`)
	n := 0
	for _, doc := range []string{"../docs/runbook.md", "../docs/install.md"} {
		inBlock := false
		for _, line := range strings.Split(string(readFile(t, doc)), "\n") {
			if strings.HasPrefix(line, "```") {
				inBlock = line == "```sh"
				continue
			}
			line = strings.TrimSpace(line)
			if !inBlock || !strings.HasPrefix(line, "correlator ") {
				continue
			}
			fields := strings.Fields(line)
			sub := []string{fields[1]}
			if fields[1] == "audit" {
				sub = append(sub, fields[2])
			}
			if sub[len(sub)-1] == "ship" {
				continue // issue [4 of 5]: not in this build yet
			}
			h := help(sub)
			cmdPart := strings.SplitN(line, "|", 2)[0]
			for _, m := range flagRe.FindAllStringSubmatch(cmdPart, -1) {
				if !strings.Contains(h, " "+m[1]+" ") && !strings.Contains(h, " "+m[1]+",") && !strings.Contains(h, ", "+m[1]+" ") {
					t.Errorf("%s: correlator %s has no flag %s: %s", doc, strings.Join(sub, " "), m[1], line)
				}
			}
			n++
		}
	}
	if n < 10 {
		t.Errorf("only %d correlator commands found in the docs", n)
	}
}
