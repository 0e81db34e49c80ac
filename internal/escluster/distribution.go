package escluster

import (
	"archive/zip"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
)

// artifact is the Maven coordinate of the distribution.
const artifact = "org.elasticsearch.distribution.integ-test-zip:elasticsearch:" + Version + ":zip"

// distDir is the unzipped distribution's directory in the cache.
func (c Config) distDir() string { return filepath.Join(c.CacheDir, "elasticsearch-"+Version) }

// tools are the programs that run the distribution.
type tools struct {
	javaHome string // a Java 17 home, for ES_JAVA_HOME
	mvn      string // empty unless needed
}

// findTools finds a Java 17 and, when needMvn, mvn. Whatever is missing is
// named in one error wrapping ErrMissingTools, with the install command.
func findTools(cfg Config, needMvn bool) (tools, error) {
	var t tools
	var missing []string
	home, javaErr := findJava17(cfg.JavaHome)
	if javaErr != nil {
		missing = append(missing, javaErr.Error())
	}
	t.javaHome = home
	if needMvn {
		p, err := exec.LookPath("mvn")
		if err != nil {
			missing = append(missing, "mvn not on PATH (Debian package maven; it fetches the distribution from Maven Central)")
		}
		t.mvn = p
	}
	if len(missing) > 0 {
		return tools{}, fmt.Errorf("%w: %s; install them with: %s", ErrMissingTools, strings.Join(missing, "; "), installHint)
	}
	return t, nil
}

var javaVersionRE = regexp.MustCompile(`version "(\d+)`)

// findJava17 returns a Java 17 home: the given one (ES_JAVA_HOME), else
// Debian's /usr/lib/jvm/java-17-openjdk-<arch>, else the java on PATH when
// it is a 17.
func findJava17(given string) (string, error) {
	if given != "" {
		if err := isJava17(given); err != nil {
			return "", fmt.Errorf("ES_JAVA_HOME=%s: %w", given, err)
		}
		return given, nil
	}
	homes, _ := filepath.Glob("/usr/lib/jvm/java-17-openjdk-*")
	for _, h := range homes {
		if isJava17(h) == nil {
			return h, nil
		}
	}
	if p, err := exec.LookPath("java"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			h := filepath.Dir(filepath.Dir(real))
			if isJava17(h) == nil {
				return h, nil
			}
		}
	}
	return "", errors.New("no Java 17 (not in /usr/lib/jvm/java-17-openjdk-*, not the java on PATH; " +
		"Debian package openjdk-17-jre-headless, or set ES_JAVA_HOME)")
}

// isJava17 checks that home/bin/java runs and says version "17.
func isJava17(home string) error {
	out, err := exec.Command(filepath.Join(home, "bin", "java"), "-version").CombinedOutput()
	if err != nil {
		return fmt.Errorf("running %s/bin/java -version: %w", home, err)
	}
	m := javaVersionRE.FindSubmatch(out)
	if m == nil || string(m[1]) != "17" {
		return fmt.Errorf("%s/bin/java is not Java 17: %s", home, firstLine(out))
	}
	return nil
}

// distributionPresent reports whether the cache holds the unzipped
// distribution (the rename that finishes unzipping is atomic).
func distributionPresent(cfg Config) bool {
	_, err := os.Stat(filepath.Join(cfg.distDir(), "bin", "elasticsearch"))
	return err == nil
}

// ensureDistribution fetches the zip with mvn and unzips it into the cache,
// once: under the cache's own lock, into a temporary directory renamed into
// place at the end, so a crash leaves nothing half-unzipped behind.
func ensureDistribution(ctx context.Context, cfg Config, t tools, log io.Writer) error {
	if distributionPresent(cfg) {
		return nil
	}
	if err := mkdirReadable(cfg.CacheDir); err != nil {
		return fmt.Errorf("creating cache %s: %w", cfg.CacheDir, err)
	}
	unlock, err := lockFile(ctx, filepath.Join(cfg.CacheDir, ".lock"))
	if err != nil {
		return err
	}
	defer unlock()
	if distributionPresent(cfg) {
		return nil
	}
	tmp, err := os.MkdirTemp(cfg.CacheDir, ".fetch-")
	if err != nil {
		return fmt.Errorf("creating a temporary directory in %s: %w", cfg.CacheDir, err)
	}
	defer os.RemoveAll(tmp)
	fmt.Fprintf(log, "escluster: fetching %s with mvn into %s\n", artifact, cfg.CacheDir)
	cmd := exec.CommandContext(ctx, t.mvn, "-B", "-q", "dependency:copy",
		"-Dartifact="+artifact, "-DoutputDirectory="+tmp)
	cmd.Dir = tmp // no pom.xml here: mvn runs the goal without a project
	cmd.Env = append(os.Environ(), "JAVA_HOME="+t.javaHome)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("fetching %s with mvn dependency:copy: %w\n%s", artifact, err, tail(out, 20))
	}
	zipPath := filepath.Join(tmp, "elasticsearch-"+Version+".zip")
	unpacked := filepath.Join(tmp, "unpacked")
	if err := unzip(zipPath, unpacked); err != nil {
		return err
	}
	if err := os.Rename(filepath.Join(unpacked, "elasticsearch-"+Version), cfg.distDir()); err != nil {
		return fmt.Errorf("moving the distribution into %s: %w", cfg.distDir(), err)
	}
	fmt.Fprintf(log, "escluster: unzipped Elasticsearch %s into %s\n", Version, cfg.distDir())
	return nil
}

// unzip extracts the archive into dir, readable by everyone (as root, the
// JVMs run as another user): directories 0755, files 0644 or 0755.
func unzip(archive, dir string) error {
	r, err := zip.OpenReader(archive)
	if err != nil {
		return fmt.Errorf("opening %s: %w", archive, err)
	}
	defer r.Close()
	for _, f := range r.File {
		name := filepath.FromSlash(f.Name)
		if !filepath.IsLocal(name) {
			return fmt.Errorf("unzipping %s: entry %q escapes the directory", archive, f.Name)
		}
		dst := filepath.Join(dir, name)
		mode := f.Mode()
		switch {
		case mode.IsDir():
			if err := mkdirReadable(dst); err != nil {
				return fmt.Errorf("unzipping %s: %w", f.Name, err)
			}
		case mode.IsRegular():
			perm := fs.FileMode(0o644)
			if mode.Perm()&0o111 != 0 {
				perm = 0o755
			}
			if err := extractFile(f, dst, perm); err != nil {
				return fmt.Errorf("unzipping %s: %w", f.Name, err)
			}
		default:
			return fmt.Errorf("unzipping %s: entry %q is a %v, not a file or directory", archive, f.Name, mode.Type())
		}
	}
	return nil
}

func extractFile(f *zip.File, dst string, perm fs.FileMode) error {
	if err := mkdirReadable(filepath.Dir(dst)); err != nil {
		return err
	}
	in, err := f.Open()
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Chmod(dst, perm) // the umask may have narrowed it
}

// mkdirReadable creates dir (and its parents) and makes dir itself 0755
// whatever the umask: the JVM user must enter it.
func mkdirReadable(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.Chmod(dir, 0o755)
}

// copyDir copies the regular files and directories under src to dst.
func copyDir(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, 0o644)
	})
}

func firstLine(b []byte) string {
	line, _, _ := bytes.Cut(bytes.TrimSpace(b), []byte("\n"))
	return string(line)
}

// tail is the last n lines of b.
func tail(b []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
