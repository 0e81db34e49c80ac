package bridge

import (
	"path"
	"strings"
)

// Caller-key actions: what the bridge did to a caller's own attempt to set
// or clear the key in a leading env prefix.
const (
	KeyOverwritten  = "overwritten"   // "<Key>=x" became "<Key>=<id>"
	KeyUnsetDropped = "unset_dropped" // "-u <Key>" and its forms removed
	// KeyUnparsed: the prefix used an env option the bridge does not parse
	// (-S, an unknown or ambiguous option) and mentions the key after it.
	// The root still carries the bridge's ID; the agent flags a descendant
	// whose value differs.
	KeyUnparsed = "unparsed"
)

// envLong are GNU env's long options and whether each takes an argument
// ('r' required, 'o' optional with "=", 'n' none). getopt_long accepts any
// unambiguous prefix, so a caller can write --uns=KEY for --unset=KEY.
var envLong = map[string]byte{
	"ignore-environment": 'n', "null": 'n', "unset": 'r', "chdir": 'r',
	"split-string": 'r', "block-signal": 'o', "default-signal": 'o',
	"ignore-signal": 'o', "list-signal-handling": 'n', "debug": 'n',
	"help": 'n', "version": 'n',
}

// longOption resolves a (possibly abbreviated) long option name.
func longOption(name string) (string, byte, bool) {
	if kind, ok := envLong[name]; ok {
		return name, kind, true
	}
	var found string
	for full := range envLong {
		if strings.HasPrefix(full, name) {
			if found != "" {
				return "", 0, false // ambiguous: env refuses it
			}
			found = full
		}
	}
	if found == "" {
		return "", 0, false
	}
	return found, envLong[found], true
}

// isEnv reports whether args[i] starts an env invocation, and how many
// words the program name takes ("env", "/usr/bin/env", "busybox env").
func isEnv(args []string, i int) (int, bool) {
	switch path.Base(args[i]) {
	case "env":
		return 1, true
	case "busybox":
		if i+1 < len(args) && args[i+1] == "env" {
			return 2, true
		}
	}
	return 0, false
}

// sanitize returns cmd with the caller's key handled in every leading env
// prefix (env ... env ... cmd): "<key>=..." assignments become
// "<key>=<id>", "-u <key>" forms are dropped. It returns cmd itself when
// nothing changed, and the actions taken.
func sanitize(cmd []string, key, id string) ([]string, []string) {
	var out []string // nil until the first change
	var actions []string
	change := func(i int) {
		if out == nil {
			out = append(make([]string, 0, len(cmd)), cmd[:i]...)
		}
	}
	keep := func(i int) {
		if out != nil {
			out = append(out, cmd[i])
		}
	}
	assign := key + "="
	i := 0
	for i < len(cmd) {
		n, ok := isEnv(cmd, i)
		if !ok {
			break
		}
		for range n {
			keep(i)
			i++
		}
		// Options: getopt permutes, but env's optstring starts with "+",
		// so options end at the first non-option.
		opaque := false
	opts:
		for i < len(cmd) && !opaque {
			a := cmd[i]
			switch {
			case a == "--":
				keep(i)
				i++
				break opts
			case a == "-" || !strings.HasPrefix(a, "-"):
				break opts
			case strings.HasPrefix(a, "--"):
				name, val, hasVal := strings.Cut(a[2:], "=")
				full, kind, ok := longOption(name)
				switch {
				case !ok || full == "split-string":
					opaque = true
				case kind == 'r' && !hasVal:
					if full == "unset" && i+1 < len(cmd) && cmd[i+1] == key {
						change(i)
						actions = append(actions, KeyUnsetDropped)
						i += 2
						continue
					}
					keep(i)
					i++
					if i < len(cmd) {
						keep(i)
						i++
					}
				case full == "unset" && val == key:
					change(i)
					actions = append(actions, KeyUnsetDropped)
					i++
				default:
					keep(i)
					i++
				}
			default:
				next, repl, op := shortCluster(a, cmd, i, key)
				if op {
					opaque = true
					break
				}
				if repl != nil {
					change(i)
					out = append(out, repl...)
					actions = append(actions, KeyUnsetDropped)
				} else {
					for j := i; j < next; j++ {
						keep(j)
					}
				}
				i = next
			}
		}
		if opaque {
			if mentions(cmd[i:], key) {
				actions = append(actions, KeyUnparsed)
			}
			break
		}
		if i < len(cmd) && cmd[i] == "-" { // "-" is -i
			keep(i)
			i++
		}
		// Assignments: any word with "=" (GNU env puts each).
		for i < len(cmd) && strings.Contains(cmd[i], "=") {
			if strings.HasPrefix(cmd[i], assign) {
				change(i)
				out = append(out, assign+id)
				actions = append(actions, KeyOverwritten)
			} else {
				keep(i)
			}
			i++
		}
	}
	if out == nil {
		return cmd, actions
	}
	return append(out, cmd[i:]...), actions
}

// shortCluster reads a short-option word at cmd[i] ("-i", "-iu", "-uKEY",
// "-C", "-0v"). It returns the index after the option and its argument;
// repl, when not nil, replaces those words because they unset key
// ("-iu KEY" becomes "-i", "-u KEY" nothing); opaque is -S or an option
// env does not have.
func shortCluster(a string, cmd []string, i int, key string) (next int, repl []string, opaque bool) {
	for j := 1; j < len(a); j++ {
		switch a[j] {
		case 'i', '0', 'v':
		case 'u', 'C':
			arg, next := a[j+1:], i+1
			if arg == "" && i+1 < len(cmd) {
				arg, next = cmd[i+1], i+2
			}
			if a[j] == 'u' && arg == key {
				repl = []string{}
				if j > 1 {
					repl = []string{a[:j]}
				}
			}
			return next, repl, false
		default: // 'S' and unknown options
			return i, nil, true
		}
	}
	return i + 1, nil, false
}

// mentions reports whether any word names key at all.
func mentions(args []string, key string) bool {
	for _, a := range args {
		if strings.Contains(a, key) {
			return true
		}
	}
	return false
}

// Rewrite returns the command the runtime execs for cmd once the bridge has
// mutated the request: `env <key>=<id>` and cmd with the caller's own key
// handled (sanitize). It is what the pods/exec patch makes of the command
// when Rewritable(cmd); the bridge leaves any other command alone.
func Rewrite(cmd []string, key, id string) []string {
	clean, _ := sanitize(cmd, key, id)
	return append([]string{"env", key + "=" + id}, clean...)
}
