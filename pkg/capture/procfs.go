package capture

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
)

// envValue is one key's first occurrence in an environment block.
type envValue struct {
	Value     string
	Found     bool
	Duplicate bool
	Truncated bool
}

// parseEnviron finds keys in a NUL-separated environment block, as
// /proc/<pid>/environ holds it. The first occurrence wins, as getenv sees it.
func parseEnviron(b []byte, keys []string) []envValue {
	out := make([]envValue, len(keys))
	for len(b) > 0 {
		var entry []byte
		if i := bytes.IndexByte(b, 0); i >= 0 {
			entry, b = b[:i], b[i+1:]
		} else {
			entry, b = b, nil
		}
		for k, key := range keys {
			if len(entry) <= len(key) || entry[len(key)] != '=' || string(entry[:len(key)]) != key {
				continue
			}
			if out[k].Found {
				out[k].Duplicate = true
				continue
			}
			v := entry[len(key)+1:]
			if len(v) > idMaxLen {
				v, out[k].Truncated = v[:idMaxLen], true
			}
			out[k].Value, out[k].Found = string(v), true
		}
	}
	return out
}

const idMaxLen = 128 // ID_MAX_LEN

var errBadStat = errors.New("malformed /proc/<pid>/stat")

// parseStat returns the parent pid and start time (clock ticks since boot)
// from /proc/<pid>/stat. The command name may hold spaces and parentheses,
// so fields are counted from the last ')'.
func parseStat(b []byte) (ppid uint32, startTicks uint64, err error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, errBadStat
	}
	f := bytes.Fields(b[i+1:])
	// f[0] is field 3 (state); ppid is field 4, starttime field 22.
	if len(f) < 20 {
		return 0, 0, fmt.Errorf("parsing stat: %d fields after comm: %w", len(f), errBadStat)
	}
	p, err := strconv.ParseUint(string(f[1]), 10, 32)
	if err != nil {
		return 0, 0, fmt.Errorf("parsing stat ppid %q: %w", f[1], errBadStat)
	}
	st, err := strconv.ParseUint(string(f[19]), 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("parsing stat starttime %q: %w", f[19], errBadStat)
	}
	return uint32(p), st, nil
}

// parseProcCgroup returns the first cgroup path in /proc/<pid>/cgroup that
// names a container, or the unified (0::) path.
func parseProcCgroup(b []byte) (path, containerID, podUID string) {
	for _, line := range bytes.Split(b, []byte{'\n'}) {
		parts := bytes.SplitN(line, []byte{':'}, 3)
		if len(parts) != 3 {
			continue
		}
		p := string(parts[2])
		if id, uid := ParseCgroupPath(p); id != "" {
			return p, id, uid
		}
		if len(parts[0]) == 1 && parts[0][0] == '0' {
			path = p
		}
	}
	return path, "", ""
}
