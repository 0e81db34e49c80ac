package join

import (
	"encoding/binary"
	"math"
	"slices"

	"github.com/execid/correlator/pkg/capture"
	"github.com/execid/correlator/pkg/vocab"
)

// The values many held processes repeat are kept once, counted by the
// processes that point at them, and charged to MaxProcessBytes by the
// table that holds them: a session's hundred processes share one pod
// identity, one copy of the key evidence, one result and one argv.

// sharedFields are a Process's inputs that a container's or a session's
// processes all repeat.
type sharedFields struct {
	ContainerID, PodUID, Namespace, Pod, Container string
	SessionRootID                                  string // a session's processes share it with their ID
	Captured, SPO, Bridge                          capture.KeyValue
}

// procShared is one shared copy of sharedFields (shares).
type procShared struct {
	sharedFields
	key  string // in shares.m; every string above is a substring of it
	refs int
	size int
}

// sharedFixedBytes is a procShared's heap beyond its key and its lists:
// the struct and its map slot.
const sharedFixedBytes = 352 + 48

// shares interns sharedFields. Like interner, it holds only what held
// processes use, and its bytes count against MaxProcessBytes.
type shares struct {
	m     map[string]*procShared
	bytes int
	buf   []byte
}

func newShares() *shares { return &shares{m: map[string]*procShared{}} }

// acquire returns the shared copy of f, counting one more user.
func (s *shares) acquire(f *sharedFields) *procShared {
	b := appendStrings(s.buf[:0], f.ContainerID, f.PodUID, f.Namespace, f.Pod, f.Container, f.SessionRootID,
		f.Captured.Value, f.Captured.Claimed, string(f.Captured.Source), f.SPO.Value, f.SPO.Claimed, string(f.SPO.Source),
		f.Bridge.Value, f.Bridge.Claimed, string(f.Bridge.Source))
	b = appendList(appendList(appendList(b, f.Captured.Flags), f.SPO.Flags), f.Bridge.Flags)
	s.buf = b
	if sh := s.m[string(b)]; sh != nil {
		sh.refs++
		return sh
	}
	k := string(b)
	d := keyReader{k: k}
	sh := &procShared{key: k, refs: 1}
	sh.ContainerID, sh.PodUID, sh.Namespace, sh.Pod, sh.Container = d.str(), d.str(), d.str(), d.str(), d.str()
	sh.SessionRootID = d.str()
	sh.Captured.Value, sh.Captured.Claimed, sh.Captured.Source = d.str(), d.str(), vocab.Source(d.str())
	sh.SPO.Value, sh.SPO.Claimed, sh.SPO.Source = d.str(), d.str(), vocab.Source(d.str())
	sh.Bridge.Value, sh.Bridge.Claimed, sh.Bridge.Source = d.str(), d.str(), vocab.Source(d.str())
	sh.Captured.Flags, sh.SPO.Flags, sh.Bridge.Flags = d.list(), d.list(), d.list()
	sh.size = sharedFixedBytes + len(k) + listHeaderBytes(sh.Captured.Flags) + listHeaderBytes(sh.SPO.Flags) +
		listHeaderBytes(sh.Bridge.Flags)
	s.m[k] = sh
	s.bytes += sh.size
	return sh
}

// retain counts one more user of sh, which is held.
func (s *shares) retain(sh *procShared) { sh.refs++ }

// release drops one user of sh, forgetting it with the last.
func (s *shares) release(sh *procShared) {
	if sh.refs--; sh.refs <= 0 {
		delete(s.m, sh.key)
		s.bytes -= sh.size
	}
}

// sharedResult is a result that processes share (results).
type sharedResult struct {
	result
	key  string
	refs int
}

// noResult is every new process's result; it is not counted.
var noResult = &sharedResult{}

// sharedResultBytes is a sharedResult's heap beyond its key and lists,
// with its map slot.
const sharedResultBytes = 128 + 48

// results interns the processes' results: a session's processes mostly
// share one (inherited, by its ID), so a process holds a pointer, not the
// 96 bytes of a result.
type results struct {
	m     map[string]*sharedResult
	bytes int
	buf   []byte
}

func newResults() *results { return &results{m: map[string]*sharedResult{}} }

// acquire returns the shared copy of r, counting one more user.
func (t *results) acquire(r *result) *sharedResult {
	if r.equal(&noResult.result) {
		return noResult
	}
	b := appendStrings(t.buf[:0], string(r.attr), r.auditID)
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(r.confidence))
	b = append(b, boolByte(r.waiting), boolByte(r.execRoot), boolByte(r.windowed))
	b = appendList(appendList(b, r.candidates), r.flags)
	t.buf = b
	if sr := t.m[string(b)]; sr != nil {
		sr.refs++
		return sr
	}
	sr := &sharedResult{result: *r, key: string(b), refs: 1}
	// Its own copies of the lists: r's may be a parent's or the caller's.
	sr.candidates, sr.flags = slices.Clone(r.candidates), slices.Clone(r.flags)
	t.m[sr.key] = sr
	t.bytes += sr.size()
	return sr
}

// retain counts one more user of sr, which is held.
func (t *results) retain(sr *sharedResult) {
	if sr != noResult {
		sr.refs++
	}
}

// release drops one user of sr, forgetting it with the last.
func (t *results) release(sr *sharedResult) {
	if sr == noResult {
		return
	}
	if sr.refs--; sr.refs <= 0 {
		delete(t.m, sr.key)
		t.bytes -= sr.size()
	}
}

func (sr *sharedResult) size() int {
	return sharedResultBytes + len(sr.key) + listBytes(sr.candidates) + listBytes(sr.flags)
}

// appendStrings and appendList write length-prefixed parts of a key.
func appendStrings(b []byte, parts ...string) []byte {
	for _, v := range parts {
		b = binary.AppendUvarint(b, uint64(len(v)))
		b = append(b, v...)
	}
	return b
}

func appendList(b []byte, l []string) []byte {
	b = binary.AppendUvarint(b, uint64(len(l)))
	return appendStrings(b, l...)
}

// keyReader reads back what appendStrings and appendList wrote, as
// substrings of the key.
type keyReader struct {
	k string
	i int
}

func (d *keyReader) uvarint() int {
	l, w := binary.Uvarint([]byte(d.k[d.i:min(len(d.k), d.i+binary.MaxVarintLen64)]))
	d.i += w
	return int(l)
}

func (d *keyReader) str() string {
	l := d.uvarint()
	v := d.k[d.i : d.i+l]
	d.i += l
	return v
}

func (d *keyReader) list() []string {
	n := d.uvarint()
	if n == 0 {
		return nil
	}
	l := make([]string, n)
	for x := range l {
		l[x] = d.str()
	}
	return l
}

func listHeaderBytes(l []string) int {
	if l == nil {
		return 0
	}
	return sliceBytes + stringBytes*len(l)
}

func boolByte(b bool) byte {
	if b {
		return 1
	}
	return 0
}
