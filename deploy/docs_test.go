package deploy

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
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

// docFiles is README.md and every docs/*.md, as paths from this package.
func docFiles(t *testing.T) []string {
	t.Helper()
	docs, err := filepath.Glob("../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) < 8 {
		t.Fatalf("only %d files in docs/*.md: %v", len(docs), docs)
	}
	return append([]string{"../README.md"}, docs...)
}

// mdLine is one line of a Markdown file: in a fenced block (its info
// string, "" for a bare fence) or in prose.
type mdLine struct {
	n       int // 1-based
	text    string
	inBlock bool
	info    string
}

func mdLines(t *testing.T, path string) []mdLine {
	t.Helper()
	var out []mdLine
	inBlock, info := false, ""
	for i, line := range strings.Split(string(readFile(t, path)), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			if inBlock {
				inBlock = false
			} else {
				inBlock, info = true, strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), "```"))
			}
			continue
		}
		out = append(out, mdLine{n: i + 1, text: line, inBlock: inBlock, info: info})
	}
	return out
}

// docCommand is one command line a doc shows: where, and its words.
type docCommand struct {
	where  string
	line   string
	words  []string
	inline bool // inline code in prose, which may also quote a log line
}

var inlineCode = regexp.MustCompile("`([^`]+)`")

// shellWords splits a command line as the shell would, roughly: quotes
// group, and the command ends at a comment, a pipe, a list operator or a
// redirection outside quotes.
func shellWords(line string) []string {
	var words []string
	var cur strings.Builder
	inWord := false
	flush := func() {
		if inWord {
			words = append(words, cur.String())
		}
		cur.Reset()
		inWord = false
	}
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case c == '\'' || c == '"':
			inWord = true
			j := strings.IndexByte(line[i+1:], c)
			if j < 0 {
				cur.WriteString(line[i+1:])
				i = len(line)
				continue
			}
			cur.WriteString(line[i+1 : i+1+j])
			i += j + 1
		case c == ' ' || c == '\t':
			flush()
		case c == '#' && !inWord, c == '|', c == ';', c == '&', c == '>', c == '<':
			flush()
			return words
		default:
			inWord = true
			cur.WriteByte(c)
		}
	}
	flush()
	return words
}

// correlatorCommand is the correlator command a line runs, as the words
// after `correlator` (`kubectl correlator X` is `correlator kubectl X`), or
// nil when it runs none.
func correlatorCommand(line string) []string {
	words := shellWords(strings.TrimSpace(line))
	for len(words) > 0 && (words[0] == "$" || words[0] == "sudo" || words[0] == "time" ||
		regexp.MustCompile(`^[A-Z_][A-Z0-9_]*=`).MatchString(words[0])) {
		words = words[1:]
	}
	switch {
	case len(words) >= 2 && words[0] == "kubectl" && words[1] == "correlator":
		return append([]string{"kubectl"}, words[2:]...)
	case len(words) >= 1 && (words[0] == "correlator" || words[0] == "bin/correlator" || words[0] == "kubectl-correlator"):
		if words[0] == "kubectl-correlator" {
			return append([]string{"kubectl"}, words[1:]...)
		}
		return words[1:]
	}
	return nil
}

// docCommands is every correlator command README.md and docs/*.md show:
// each line of a sh/bash/shell block (continuations joined), each `$ `
// line of any block, and each inline code span that starts with
// `correlator ` or `kubectl correlator `.
func docCommands(t *testing.T) []docCommand {
	t.Helper()
	var out []docCommand
	for _, doc := range docFiles(t) {
		lines := mdLines(t, doc)
		for i := 0; i < len(lines); i++ {
			l := lines[i]
			where := fmt.Sprintf("%s:%d", strings.TrimPrefix(doc, "../"), l.n)
			if !l.inBlock {
				for _, m := range inlineCode.FindAllStringSubmatch(l.text, -1) {
					if strings.HasPrefix(m[1], "correlator ") || strings.HasPrefix(m[1], "kubectl correlator ") {
						if w := correlatorCommand(m[1]); len(w) > 0 {
							out = append(out, docCommand{where, m[1], w, true})
						}
					}
				}
				continue
			}
			text := strings.TrimSpace(l.text)
			shell := l.info == "sh" || l.info == "bash" || l.info == "shell" || l.info == "console"
			if !shell && !strings.HasPrefix(text, "$ ") {
				continue
			}
			for strings.HasSuffix(text, `\`) && i+1 < len(lines) && lines[i+1].inBlock {
				i++
				text = strings.TrimSuffix(text, `\`) + " " + strings.TrimSpace(lines[i].text)
			}
			if w := correlatorCommand(text); len(w) > 0 {
				out = append(out, docCommand{where, text, w, false})
			}
		}
	}
	return out
}

// TestDocCommands runs `correlator <subcommand> --help` for every
// correlator and `kubectl correlator` command README.md and docs/*.md show
// (shell blocks, `$ ` lines, inline code) and checks that each subcommand
// and flag it uses exists.
func TestDocCommands(t *testing.T) {
	bin := correlatorBin(t)
	helps := map[string]string{}
	help := func(sub []string) string {
		k := strings.Join(sub, " ")
		if h, ok := helps[k]; ok {
			return h
		}
		out, err := exec.Command(bin, append(append([]string{}, sub...), "--help")...).CombinedOutput()
		if err != nil {
			t.Fatalf("correlator %s --help: %v\n%s", k, err, out)
		}
		helps[k] = string(out)
		return helps[k]
	}
	// subcommands lists a command's subcommands from its help.
	subcommands := func(sub []string) map[string]bool {
		out := map[string]bool{}
		h := help(sub)
		i := strings.Index(h, "Available Commands:")
		if i < 0 {
			return out
		}
		for _, line := range strings.Split(h[i:], "\n")[1:] {
			f := strings.Fields(line)
			if len(f) == 0 {
				break
			}
			out[f[0]] = true
		}
		return out
	}
	flagRe := regexp.MustCompile(`^(--[a-z][a-z0-9-]*|-[a-zA-Z])(=.*)?$`)
	n, plugin := 0, 0
	for _, c := range docCommands(t) {
		subs := subcommands(nil)
		if !subs[c.words[0]] && c.inline {
			continue // prose quoting correlator, as in the log line `correlator running`
		}
		if !subs[c.words[0]] {
			t.Errorf("%s: correlator has no subcommand %q: %s", c.where, c.words[0], c.line)
			continue
		}
		sub := []string{c.words[0]}
		var flags []string
		for _, w := range c.words[1:] {
			if m := flagRe.FindStringSubmatch(w); m != nil {
				flags = append(flags, m[1])
				continue
			}
			if subcommands(sub)[w] {
				sub = append(sub, w)
			}
		}
		h := help(sub)
		for _, f := range flags {
			if f == "-h" || f == "--help" {
				continue
			}
			if !strings.Contains(h, " "+f+" ") && !strings.Contains(h, " "+f+",") && !strings.Contains(h, ", "+f+" ") &&
				!strings.Contains(h, " "+f+"\n") {
				t.Errorf("%s: correlator %s has no flag %s: %s", c.where, strings.Join(sub, " "), f, c.line)
			}
		}
		if sub[0] == "kubectl" {
			plugin++
		}
		n++
	}
	t.Logf("checked %d correlator commands in README.md and docs/*.md (%d of the kubectl plugin)", n, plugin)
	if n < 40 || plugin < 10 {
		t.Errorf("only %d correlator commands (%d of the plugin) found in the docs", n, plugin)
	}
}

// makeTargets is every target the Makefile defines.
func makeTargets(t *testing.T) map[string]bool {
	t.Helper()
	re := regexp.MustCompile(`(?m)^([a-z][a-z0-9-]*)\s*:([^=]|$)`)
	out := map[string]bool{}
	for _, m := range re.FindAllStringSubmatch(string(readFile(t, "../Makefile")), -1) {
		out[m[1]] = true
	}
	if len(out) < 15 {
		t.Fatalf("only %d targets in the Makefile: %v", len(out), out)
	}
	return out
}

// TestDocMakeTargets: every `make <target>` in README.md and docs/*.md
// (code blocks and inline code) names a target the Makefile defines.
func TestDocMakeTargets(t *testing.T) {
	targets := makeTargets(t)
	re := regexp.MustCompile(`(?:^|[\s;&|(])make\s+(?:[A-Z_][A-Z0-9_]*=\S*\s+)*([a-z][a-z0-9-]*)`)
	n := 0
	for _, doc := range docFiles(t) {
		for _, l := range mdLines(t, doc) {
			var code []string
			if l.inBlock {
				code = []string{l.text}
			} else {
				for _, m := range inlineCode.FindAllStringSubmatch(l.text, -1) {
					code = append(code, m[1])
				}
			}
			for _, c := range code {
				for _, m := range re.FindAllStringSubmatch(c, -1) {
					n++
					if !targets[m[1]] {
						t.Errorf("%s:%d: make %s: no such target in the Makefile: %s", strings.TrimPrefix(doc, "../"), l.n, m[1], c)
					}
				}
			}
		}
	}
	if n < 30 {
		t.Errorf("only %d make commands found in the docs", n)
	}
}

// githubSlug is the anchor GitHub gives a heading.
func githubSlug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// mdAnchors is every heading anchor of a Markdown file.
func mdAnchors(t *testing.T, path string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, l := range mdLines(t, path) {
		if l.inBlock || !strings.HasPrefix(l.text, "#") {
			continue
		}
		h := strings.TrimLeft(l.text, "#")
		if !strings.HasPrefix(h, " ") {
			continue
		}
		s := githubSlug(h)
		for i := 1; out[s]; i++ { // GitHub numbers repeated headings
			s = fmt.Sprintf("%s-%d", githubSlug(h), i)
		}
		out[s] = true
	}
	return out
}

// TestDocLinks: every relative link and image in README.md and
// docs/*.md names a file or directory that exists, and a #fragment into a
// Markdown file names one of its headings.
func TestDocLinks(t *testing.T) {
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	n := 0
	for _, doc := range docFiles(t) {
		for _, l := range mdLines(t, doc) {
			if l.inBlock {
				continue
			}
			text := inlineCode.ReplaceAllString(l.text, "``")
			for _, m := range link.FindAllStringSubmatch(text, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				n++
				where := fmt.Sprintf("%s:%d", strings.TrimPrefix(doc, "../"), l.n)
				file, frag, _ := strings.Cut(target, "#")
				path := doc
				if file != "" {
					path = filepath.Join(filepath.Dir(doc), filepath.FromSlash(file))
					if _, err := os.Stat(path); err != nil {
						t.Errorf("%s: link to %s: %v", where, target, err)
						continue
					}
				}
				if frag != "" && strings.HasSuffix(path, ".md") && !mdAnchors(t, path)[frag] {
					t.Errorf("%s: link to %s: %s has no heading with the anchor #%s", where, target, strings.TrimPrefix(path, "../"), frag)
				}
			}
		}
	}
	if n < 50 {
		t.Errorf("only %d relative links found in the docs", n)
	}
}

// TestReadmeFrontDoor: README.md stays a front door: under 300 lines, with
// the picture before its first section, one figures table of what
// correlator costs today (each row with its command and date) and the
// tested-platforms table.
func TestReadmeFrontDoor(t *testing.T) {
	readme := string(readFile(t, "../README.md"))
	if n := strings.Count(readme, "\n"); n >= 300 {
		t.Errorf("README.md has %d lines; keep it under 300 and move the rest to docs/", n)
	}
	head, _, _ := strings.Cut(readme, "\n## ")
	if !regexp.MustCompile(`!\[[^\]]*\]\(docs/path\.svg\)`).MatchString(head) {
		t.Error("README.md does not show docs/path.svg before its first section")
	}
	rows := 0
	date := regexp.MustCompile(`\| 20[0-9]{2}-[01][0-9]-[0-3][0-9] \|$`)
	inCost := false
	for _, line := range strings.Split(readme, "\n") {
		if strings.HasPrefix(line, "## ") {
			inCost = strings.Contains(line, "costs today")
		}
		if !inCost || !strings.HasPrefix(line, "| ") || strings.HasPrefix(line, "| what |") {
			continue
		}
		rows++
		if !date.MatchString(line) || !strings.Contains(line, "`") {
			t.Errorf("README.md's cost row has no command or no date: %s", line)
		}
	}
	if rows < 5 {
		t.Errorf("README.md's \"costs today\" section has %d figure rows", rows)
	}
	// The tested platforms: a table row per kernel of the matrix
	// (docs/kernels.md), naming the runtimes tested on it.
	var platforms []string
	for _, line := range strings.Split(readme, "\n") {
		if strings.HasPrefix(line, "| ") && strings.Contains(line, "runc") {
			platforms = append(platforms, line)
		}
	}
	for _, k := range []string{"5.10.", "6.1.", "6.12.", "6.18."} {
		found := false
		for _, row := range platforms {
			found = found || strings.Contains(row, " "+k)
		}
		if !found {
			t.Errorf("README.md has no tested-platforms row for kernel %sx naming its runtimes", k)
		}
	}
	if !strings.Contains(strings.Join(platforms, "\n"), "crun") {
		t.Error("README.md's tested platforms do not name crun")
	}
}

// TestDocPicture: README.md and docs/README.md show docs/path.svg, the SVG
// carries each box path.dot names, and each pkg/... box is a real
// directory.
func TestDocPicture(t *testing.T) {
	if !strings.Contains(string(readFile(t, "../docs/README.md")), "](path.svg)") {
		t.Error("docs/README.md does not show path.svg")
	}
	dot := string(readFile(t, "../docs/path.dot"))
	svg := string(readFile(t, "../docs/path.svg"))
	pkgs := map[string]bool{}
	for _, m := range regexp.MustCompile(`label="([^"]*)"`).FindAllStringSubmatch(dot, -1) {
		for _, p := range regexp.MustCompile(`\bpkg/[a-z0-9_]+(?:/[a-z0-9_]+)*`).FindAllString(m[1], -1) {
			pkgs[p] = true
		}
	}
	if len(pkgs) < 8 {
		t.Errorf("docs/path.dot names only %d pkg/ boxes: %v", len(pkgs), pkgs)
	}
	for p := range pkgs {
		if !strings.Contains(svg, p) {
			t.Errorf("docs/path.svg lacks %s, which docs/path.dot names: run make picture", p)
		}
		if fi, err := os.Stat(filepath.Join("..", filepath.FromSlash(p))); err != nil || !fi.IsDir() {
			t.Errorf("docs/path.dot names %s, which is not a directory of this repository", p)
		}
	}
}
