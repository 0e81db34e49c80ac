package bridge

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/execid/correlator/internal/testutil"
)

// The argv tests run commands for real, as the runtime execs them and as
// the bridge rewrites them, and compare what the program saw. The program
// is testdata/argvprint, installed under every name of printerPaths in a
// root laid out like a container's: root/bin is PATH (holding `env` too),
// the working directory is root. On the host root is a temporary
// directory; in a runc container it is "/".

// printerPaths are where the printer is installed, relative to the root.
// No name is a busybox applet, which busybox's env would run instead.
func printerPaths() []string {
	p := []string{"opt/a=b/run", "opt/sp ace/-i"}
	for _, n := range []string{"run", "one", "-", "--", "-i", "-u", "-S", "-0", "-C", "-v", "--help",
		"-iu", "a=b", "=x", "x y", "ü=ß", "é"} {
		p = append(p, "bin/"+n)
	}
	return p
}

// firstWords are the command's first words the tests draw from: every
// name on PATH, absolute and relative paths, and words that name nothing.
// FuzzArgvFaithful's corpus indexes this list: append only.
func firstWords(root string) []string {
	w := []string{root + "/opt/a=b/run", root + "/opt/sp ace/-i", root + "/bin/run", "./bin/run", "./bin/a=b",
		"", "nope", "nope=1", "-nope", "=", "/nope/x=y"}
	for _, p := range printerPaths() {
		if n, ok := strings.CutPrefix(p, "bin/"); ok {
			w = append(w, n)
		}
	}
	return w
}

// specialWords are the later words drawn whole: what env or a shell might
// treat specially, and the bridge's own key.
func specialWords() []string {
	return []string{"", "--", "-", "-i", "-u", "-S", "-0", "a=b", "=", k + "=x", k, " ", "ü=ß", "--help", "one", "run"}
}

// randomCommand draws a command: a first word from firsts, then up to six
// words, whole special words or strings of "=", "-", spaces and unicode.
func randomCommand(r *rand.Rand, firsts []string) []string {
	cmd := []string{firsts[r.IntN(len(firsts))]}
	specials := specialWords()
	alphabet := []rune("ab=- _\tü世=-")
	for range r.IntN(7) {
		if r.IntN(3) == 0 {
			cmd = append(cmd, specials[r.IntN(len(specials))])
			continue
		}
		w := make([]rune, r.IntN(6))
		for i := range w {
			w[i] = alphabet[r.IntN(len(alphabet))]
		}
		cmd = append(cmd, string(w))
	}
	return cmd
}

// argvOutcome is what came of running a command: whether the printer ran,
// and the argv it saw.
type argvOutcome struct {
	ran  bool
	argv []string
}

func (o argvOutcome) equal(p argvOutcome) bool {
	return o.ran == p.ran && slices.Equal(o.argv, p.argv)
}

func (o argvOutcome) String() string {
	if !o.ran {
		return "did not run"
	}
	return fmt.Sprintf("ran with argv %q", o.argv)
}

// parseArgv reads the printer's output; anything else means it did not run.
func parseArgv(out []byte) argvOutcome {
	rest, ok := bytes.CutPrefix(out, []byte("argv\x00"))
	if !ok || (len(rest) > 0 && rest[len(rest)-1] != 0) {
		return argvOutcome{}
	}
	argv := strings.Split(string(rest), "\x00")
	return argvOutcome{ran: true, argv: argv[:len(argv)-1]}
}

// argvRun runs argv as the runtime would exec it as a container's process.
type argvRun func(t testing.TB, argv []string) argvOutcome

// buildPrinter builds testdata/argvprint static into a temporary directory.
func buildPrinter(t testing.TB) string {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("finding go to build the argv printer: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "argvprint")
	cmd := exec.Command(gobin, "build", "-o", bin, "./testdata/argvprint")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the argv printer: %v: %s", err, out)
	}
	return bin
}

// hostRoot lays out a root in a temporary directory with the printer at
// printerPaths and root/bin/env linked to envBin.
func hostRoot(t testing.TB, printer, envBin string) string {
	t.Helper()
	root := t.TempDir()
	for _, p := range append(printerPaths(), "bin/env") {
		target := printer
		if p == "bin/env" {
			target = envBin
		}
		dst := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, dst); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// hostRun execs argv in root as runc does: a word with "/" is a path
// (relative to the working directory), "" names nothing, any other word is
// looked up in PATH (root/bin).
func hostRun(root string) argvRun {
	return func(t testing.TB, argv []string) argvOutcome {
		t.Helper()
		path := argv[0]
		switch {
		case path == "":
			return argvOutcome{}
		case !strings.Contains(path, "/"):
			path = filepath.Join(root, "bin", path)
		case !filepath.IsAbs(path):
			path = filepath.Join(root, path)
		}
		if st, err := os.Stat(path); err != nil || !st.Mode().IsRegular() || st.Mode()&0o111 == 0 {
			return argvOutcome{}
		}
		ctx, cancel := context.WithTimeout(t.Context(), testutil.EventuallyBound)
		defer cancel()
		cmd := exec.CommandContext(ctx, path)
		cmd.Args, cmd.Dir, cmd.Env = argv, root, []string{"PATH=" + filepath.Join(root, "bin")}
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		var exit *exec.ExitError
		if err := cmd.Run(); err != nil && !errors.As(err, &exit) {
			t.Fatalf("running %q: %v", argv, err)
		}
		return parseArgv(stdout.Bytes())
	}
}

// hostEnvs are the env implementations to run on the host, by name. GNU
// env is required; busybox (busybox-static) is required under CI=true;
// toybox and uutils' env are used where installed.
func hostEnvs(t testing.TB) map[string]string {
	t.Helper()
	envs := map[string]string{}
	gnu, err := exec.LookPath("/usr/bin/env")
	if err != nil {
		t.Fatalf("finding GNU env: %v", err)
	}
	envs["gnu"] = gnu
	if bb, err := exec.LookPath("busybox"); err == nil {
		envs["busybox"] = bb
	} else if testutil.InCI() {
		t.Fatalf("finding busybox (busybox-static): %v", err)
	} else {
		t.Log("no busybox on PATH (apt-get install busybox-static): GNU env only")
	}
	for name, p := range map[string]string{"toybox": "/usr/bin/toybox", "uutils": "/usr/lib/cargo/bin/coreutils/env"} {
		if _, err := os.Stat(p); err == nil {
			envs[name] = p
		}
	}
	return envs
}

// appletNames are the busybox and toybox applets on the host. Their env
// runs an applet of that name itself (busybox's FEATURE_PREFER_APPLETS,
// toybox's built-ins) rather than searching PATH, so a test that lets
// env run such a word would run a host tool, not the printer.
func appletNames() map[string]bool {
	names := map[string]bool{}
	for _, c := range [][]string{{"busybox", "--list"}, {"toybox"}} {
		out, err := exec.Command(c[0], c[1:]...).Output()
		if err != nil {
			continue
		}
		for _, n := range strings.Fields(string(out)) {
			names[n] = true
		}
	}
	return names
}

// argvCounts tallies checkArgv's cases, so a test can see that the
// commands did run and that rejected ones were tried.
type argvCounts struct{ ranAccepted, unfaithful, conservative int }

// checkArgv runs cmd directly and as the bridge rewrites it (even where
// the bridge would not). A command Rewritable accepts must give the
// program the same argv, or fail to run both ways; one it rejects for its
// "=" must misbehave whenever it runs directly; "-" is refused only
// conservatively (see Rewritable).
func checkArgv(t testing.TB, where string, run argvRun, cmd []string, n *argvCounts) {
	t.Helper()
	direct := run(t, cmd)
	bridged := run(t, Rewrite(cmd, k, fixedID))
	switch {
	case Rewritable(cmd):
		if !direct.equal(bridged) {
			t.Errorf("%s: accepted %q is not faithful:\n direct  %v\n bridged %v", where, cmd, direct, bridged)
		}
		if direct.ran {
			n.ranAccepted++
		}
	case cmd[0] == "-":
		n.conservative++
	case direct.ran:
		if direct.equal(bridged) {
			t.Errorf("%s: rejected %q runs faithfully: %v", where, cmd, direct)
		}
		n.unfaithful++
	}
}

// argvTable are the commands every variant runs before the random ones.
func argvTable(root string) [][]string {
	return [][]string{
		{root + "/opt/a=b/run", "one", "two"},
		{"run", "one", "two"}, {"-", "x"}, {"--", "x"}, {"-i", "x"}, {"-u", k}, {"-S", "run x"},
		{"--help"}, {"-iu", "x"}, {"-0"}, {"a=b", "run"}, {"=x"}, {""}, {"", "run"}, {"nope"},
		{"nope=1", "run"}, {"x y", "a b"}, {"é", "ü=ß", "--"}, {"run", "", "", "-"}, {"run", k + "=x"},
		{"./bin/run", "-i"}, {root + "/opt/sp ace/-i", "-u", k}, {"ü=ß"}, {root + "/bin/run", "-", "=", "--"},
	}
}

// checkControl: the old rewrite of `/opt/a=b/run one two` runs `one two`,
// so the harness sees an unfaithful rewrite when there is one.
func checkControl(t testing.TB, run argvRun, root string) {
	t.Helper()
	cmd := []string{root + "/opt/a=b/run", "one", "two"}
	if got := run(t, cmd); !got.equal(argvOutcome{true, cmd}) {
		t.Fatalf("direct %q: %v", cmd, got)
	}
	want := argvOutcome{true, []string{"one", "two"}}
	if got := run(t, Rewrite(cmd, k, fixedID)); !got.equal(want) {
		t.Errorf("control: env ran %v for %q, want the misreading %v", got, cmd, want)
	}
	if Rewritable(cmd) {
		t.Errorf("Rewritable(%q)", cmd)
	}
}

// checkArgvProperty runs the table and n random commands through run.
func checkArgvProperty(t *testing.T, where string, run argvRun, root string, seed uint64, n int) {
	checkControl(t, run, root)
	var counts argvCounts
	cmds := argvTable(root)
	r := rand.New(rand.NewPCG(seed, 0x62726964676521))
	applets := appletNames()
	for total := len(cmds) + n; len(cmds) < total; {
		if cmd := randomCommand(r, firstWords(root)); !slices.ContainsFunc(cmd, func(w string) bool { return applets[w] }) {
			cmds = append(cmds, cmd)
		}
	}
	for _, cmd := range cmds {
		checkArgv(t, where, run, cmd, &counts)
	}
	if counts.ranAccepted < len(cmds)/4 || counts.unfaithful == 0 || counts.conservative == 0 {
		t.Errorf("weak run (seed %d): %+v of %d commands", seed, counts, len(cmds))
	}
	if t.Failed() {
		t.Logf("seed %d; rerun with BRIDGE_ARGV_SEED=%d", seed, seed)
	}
}

// argvSeed is BRIDGE_ARGV_SEED, or a fresh seed, logged on failure.
func argvSeed(t testing.TB) uint64 {
	t.Helper()
	s := os.Getenv("BRIDGE_ARGV_SEED")
	if s == "" {
		return rand.Uint64()
	}
	seed, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatalf("parsing BRIDGE_ARGV_SEED: %v", err)
	}
	return seed
}

// TestArgvFaithfulHost: on the host, with GNU env and busybox env (and
// toybox or uutils where installed) as the root's env. No root needed.
func TestArgvFaithfulHost(t *testing.T) {
	printer := buildPrinter(t)
	seed := argvSeed(t)
	for name, envBin := range hostEnvs(t) {
		t.Run(name, func(t *testing.T) {
			root := hostRoot(t, printer, envBin)
			checkArgvProperty(t, name, hostRun(root), root, seed, 300)
		})
	}
}

// TestArgvFaithfulContainer: in a runc container whose rootfs is Debian's
// busybox-static, its env the image's, each command exec'd as a
// containerd exec is (`runc exec --process`). Root only.
func TestArgvFaithfulContainer(t *testing.T) {
	testutil.RequireRoot(t)
	printer := buildPrinter(t)
	files := map[string]string{}
	for _, p := range printerPaths() {
		files["/"+p] = printer
	}
	c := testutil.NewContainer(t, testutil.ContainerConfig{Files: files})
	run := func(t testing.TB, argv []string) argvOutcome {
		t.Helper()
		out, err := c.ExecProcess(t.Context(), c.Env, argv)
		o := parseArgv(out)
		if o.ran && err != nil {
			t.Fatalf("runc exec %q: %v: %q", argv, err, out)
		}
		return o
	}
	checkArgvProperty(t, "runc, busybox env", run, "", argvSeed(t), 40)
}
