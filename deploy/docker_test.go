package deploy

import (
	"debug/elf"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"testing"
)

// The Dockerfile's build, as the test repeats it.
const dockerBuild = `CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath -ldflags "-s -w" -o /out/correlator ./cmd/correlator`

// ignored reports whether .dockerignore keeps a repository path out of the
// build context. It knows the pattern forms the file uses: a path (and
// everything under it), a glob on the top level, and **/ for any depth.
func ignored(patterns []string, p string) bool {
	parts := strings.Split(p, "/")
	for _, pat := range patterns {
		if rest, ok := strings.CutPrefix(pat, "**/"); ok {
			for i := range parts {
				for j := i + 1; j <= len(parts); j++ {
					if m, _ := path.Match(rest, strings.Join(parts[i:j], "/")); m {
						return true
					}
				}
			}
			continue
		}
		for j := 1; j <= len(parts); j++ {
			if m, _ := path.Match(pat, strings.Join(parts[:j], "/")); m {
				return true
			}
		}
	}
	return false
}

func TestIgnoredPatterns(t *testing.T) {
	pats := []string{".git", "docs", "**/testdata", "**/*_test.go", "*.md"}
	for p, want := range map[string]bool{
		"docs/api.md": true, "README.md": true, "pkg/x/README.md": false,
		"pkg/capture/testdata/a": true, "pkg/api/server_test.go": true,
		"pkg/api/server.go": false, "go.mod": false, ".gitignore": false,
	} {
		if got := ignored(pats, p); got != want {
			t.Errorf("ignored(%s) = %v, want %v", p, got, want)
		}
	}
}

// TestDockerContextBuilds builds the binary from exactly the files
// .dockerignore lets into the build context, with the Dockerfile's command:
// no docker engine runs here, but a context that lacks a file fails here.
func TestDockerContextBuilds(t *testing.T) {
	df := string(readFile(t, "../Dockerfile"))
	if !strings.Contains(df, dockerBuild) {
		t.Fatalf("Dockerfile's build is not the one this test repeats:\n%s", dockerBuild)
	}
	var pats []string
	for _, l := range strings.Split(string(readFile(t, "../.dockerignore")), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			pats = append(pats, l)
		}
	}
	out, err := exec.Command("git", "-C", "..", "ls-files", "--cached", "--others", "--exclude-standard").Output()
	if err != nil {
		t.Skipf("not a git checkout: %v", err)
	}
	ctx := t.TempDir()
	n := 0
	for _, f := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if ignored(pats, f) {
			continue
		}
		b, err := os.ReadFile(filepath.Join("..", f))
		if os.IsNotExist(err) {
			continue // deleted in the work tree
		}
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(ctx, f)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, b, 0o644); err != nil {
			t.Fatal(err)
		}
		n++
	}
	bin := filepath.Join(t.TempDir(), "correlator")
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", bin, "./cmd/correlator")
	cmd.Dir = ctx
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building from the %d files of the docker context: %v\n%s", n, err, out)
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("binary has %s: not static, distroless/static has no libc", p.Type)
		}
	}
}
