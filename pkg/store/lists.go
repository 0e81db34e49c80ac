package store

import "github.com/execid/correlator/pkg/join"

// Every backend returns the lists the API document promises as arrays
// (a session's stages and its conflicts', a process's flags, a page of
// items, a session's processes) as empty slices, never nil, so that they
// encode as [] whatever the backend stored for "none". The lists the
// records omit when empty (a session's flags, ports, ...) stay as stored.

// FillSession makes ss's lists non-nil.
func FillSession(ss *join.Session) {
	ss.Stages = NonNil(ss.Stages)
	for i := range ss.Conflicts {
		ss.Conflicts[i].Stages = NonNil(ss.Conflicts[i].Stages)
	}
}

// FillProcess makes p's lists non-nil.
func FillProcess(p *join.Process) {
	p.Flags = NonNil(p.Flags)
}

// NonNil is s, or an empty slice where s is nil.
func NonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
