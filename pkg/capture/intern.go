package capture

// A node's events repeat a few strings thousands of times: the cgroup of
// a busy container, the binaries a shell runs, a session's audit ID, the
// parent every child of one shell names. The decoder hands out one string
// for each (an intern table), so an event allocates only what is new to
// it, and the join, the store's batch and the live process table share
// one copy. Each table is bounded: full, it starts over, so an attacker
// flooding distinct values costs it nothing but hits.

const (
	maxInternedCgroups = 1024
	maxInternedStrings = 4096
)

// interner maps byte strings to one string each. Not safe for
// concurrent use: the decoder's single reader owns it.
type interner struct {
	m map[string]string
}

// get returns b as a string, the same one each time while it is held.
func (in *interner) get(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	if s, ok := in.m[string(b)]; ok { // no allocation for the lookup
		return s
	}
	if in.m == nil || len(in.m) >= maxInternedStrings {
		in.m = make(map[string]string, 64)
	}
	s := string(b)
	in.m[s] = s
	return s
}

// cgroupInfo is what an event's two cgroup names decode to.
type cgroupInfo struct {
	path, containerID, podUID string
}

// cgroups caches each (parent, leaf) pair's decoding: the path join and
// ParseCgroupPath run once per container, not once per event.
type cgroups struct {
	m   map[string]cgroupInfo
	key []byte // scratch: parent NUL leaf
}

func (c *cgroups) get(parent, leaf []byte) cgroupInfo {
	parent, leaf = cBytes(parent), cBytes(leaf)
	c.key = append(append(append(c.key[:0], parent...), 0), leaf...)
	if info, ok := c.m[string(c.key)]; ok {
		return info
	}
	if c.m == nil || len(c.m) >= maxInternedCgroups {
		c.m = make(map[string]cgroupInfo, 16)
	}
	info := cgroupInfo{path: joinCgroup(string(parent), string(leaf))}
	info.containerID, info.podUID = ParseCgroupPath(info.path)
	c.m[string(c.key)] = info
	return info
}

// keyCache remembers the last process key it rendered: a shell's
// children all name it as their parent, and a session's processes their
// root.
type keyCache struct {
	tgid  uint32
	start uint64
	key   string
}

func (c *keyCache) get(tgid uint32, startNs uint64) string {
	if c.key != "" && c.tgid == tgid && c.start/ticksNs == startNs/ticksNs {
		return c.key
	}
	c.tgid, c.start, c.key = tgid, startNs, ProcessKey(tgid, startNs)
	return c.key
}
