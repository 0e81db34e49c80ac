package testutil

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// CorporaEnv names the variable that points at a `corpora` directory, the
// one holding audit/ and the other public corpora.
const CorporaEnv = "CORRELATOR_CORPORA"

// defaultCorpora is where the public corpora sit on the project's machines.
const defaultCorpora = "/work/shared/corpora"

// AuditCorpus returns the directory of the public audit-log corpus, which
// lives beside the repository and is never copied into it. It looks in
// $CORRELATOR_CORPORA/audit if that is set (a wrong setting fails the
// test), else in shared/corpora/audit of the module root and of each of its
// ancestors (../shared beside the checkout), else in
// /work/shared/corpora/audit. Found nowhere, the test is skipped, saying
// where it looked; under CI=true it fails, since a skip there would hide
// that the corpus tests never ran.
func AuditCorpus(t testing.TB) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatalf("finding the audit corpus: %v", err)
	}
	return auditCorpus(t, corpusLookup{env: os.Getenv(CorporaEnv), wd: wd, fallback: defaultCorpora, ci: InCI()})
}

// corpusLookup is AuditCorpus's environment, explicit so it can be tested
// without the machine's own directories: top bounds the walk up from wd.
type corpusLookup struct {
	env      string // $CORRELATOR_CORPORA
	wd       string // the test's working directory
	top      string // the highest directory searched; "" (or one not above wd) is the filesystem root
	fallback string // a corpora directory to try last
	ci       bool
}

func auditCorpus(t testing.TB, l corpusLookup) string {
	t.Helper()
	if l.env != "" {
		dir := filepath.Join(l.env, "audit")
		if !isDir(dir) {
			t.Fatalf("%s=%s, but %s is not a directory: point it at the corpora directory that holds audit/", CorporaEnv, l.env, dir)
		}
		return dir
	}
	tried := l.candidates()
	for _, dir := range tried {
		if isDir(dir) {
			return dir
		}
	}
	skipOrFail(t, l.ci, fmt.Sprintf("public audit corpus not found; tried %s; set %s to the corpora directory that holds audit/, e.g. %s=$HOME/shared/corpora",
		strings.Join(tried, ", "), CorporaEnv, CorporaEnv))
	return ""
}

// candidates lists the audit corpus directories to try, in order: under the
// module root and each ancestor up to top, then under the fallback.
func (l corpusLookup) candidates() []string {
	var out []string
	for _, dir := range ancestors(moduleRoot(l.wd, l.top), l.top) {
		out = append(out, filepath.Join(dir, "shared", "corpora", "audit"))
	}
	if l.fallback != "" {
		if fb := filepath.Join(l.fallback, "audit"); !slices.Contains(out, fb) {
			out = append(out, fb)
		}
	}
	return out
}

// moduleRoot is the nearest directory at or above dir, up to top, holding
// go.mod; dir itself if there is none.
func moduleRoot(dir, top string) string {
	for _, d := range ancestors(dir, top) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d
		}
	}
	return filepath.Clean(dir)
}

// ancestors lists dir and each directory above it, nearest first, up to and
// including top; up to the filesystem root when top is empty or not above
// dir.
func ancestors(dir, top string) []string {
	if top != "" {
		top = filepath.Clean(top)
	}
	var out []string
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		out = append(out, d)
		if d == top || filepath.Dir(d) == d {
			return out
		}
	}
}

func isDir(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.IsDir()
}

// skipOrFail skips the test for reason, except under CI=true, where a skip
// would hide that the test never ran: there it fails.
func skipOrFail(t testing.TB, ci bool, reason string) {
	t.Helper()
	if ci {
		t.Fatalf("%s (under CI=true a skip is a failure)", reason)
	}
	t.Skip(reason)
}
