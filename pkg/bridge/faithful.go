package bridge

import "strings"

// Rewritable reports whether `env KEY=<id> cmd...` runs the program cmd[0]
// with argv exactly cmd, as the runtime would run cmd itself. When it is
// false the bridge leaves the exec alone (SkipUnrewritable).
//
// Every env the bridge may meet reads its arguments in the same order:
// options first (getopt with "+", so they end at the first non-option,
// which for the rewrite is KEY=<id>), then a lone "-" (only before the
// assignments), then every leading word containing "=" as an assignment,
// and the first word without one is the program, exec'd with the rest as
// its argv. Measured, with a first word W after `K=v` (TestArgvFaithful*,
// FuzzArgvFaithful):
//
//   - GNU coreutils 9.1 env, Debian's busybox-static 1.35 env and toybox
//     0.8.9 env take any W containing "=" ("/opt/a=b/run", "a=b", "=x") for
//     an assignment and run the next word instead (or print the
//     environment when there is none);
//   - they run every other W as the program with argv[0] = W: "-", "--",
//     "-i", "-u", "-S", "--help", "-iu", a word with spaces or unicode. No
//     option is parsed after an assignment. "" is exec'd and fails with
//     ENOENT, as the runtime's own lookup of "" fails;
//   - uutils coreutils 0.0.17 (Debian's rust-coreutils) env also reads a
//     lone "-" after the assignments as -i and runs the next word with an
//     empty environment. Refusing "-" is free: no image ships a program
//     named "-".
//
// Where the rewrite does run the program, it differs from the direct exec
// only in the environment (KEY is set) and in ways argv cannot show: a
// program not found fails as env's exit 127 rather than as the runtime's
// exec error, and env's execvp runs a script without "#!" through /bin/sh
// where the runtime's exec fails. Debian's busybox-static env also runs
// its own applet for an applet name without "/" ("ls", "sh") before
// searching PATH, which differs only in an image whose env is that busybox
// and whose PATH holds another program of that name.
func Rewritable(cmd []string) bool {
	if len(cmd) == 0 {
		return false
	}
	return cmd[0] != "-" && !strings.Contains(cmd[0], "=")
}
