package join

import (
	"encoding/binary"
	"maps"
	"slices"

	"github.com/execid/correlator/pkg/auditlog"
)

// internMaxLen bounds what is shared: longer values are rare and distinct,
// so a record keeps (and pays for) its own.
const internMaxLen = 512

// Rough heap costs of an interned value beyond its bytes: the entry, its
// map slot, and the slice or map it hands out.
const (
	internEntryBytes = 96
	internPairBytes  = 48 // one key/value of a shared map
)

type interned struct {
	s    string
	list []string
	ann  map[string]string
	refs int
	size int
}

// interner shares the values that repeat across records (users, groups,
// namespaces, pods, annotations), so a flood of distinct requests costs
// only what is distinct in each. Values are counted by the records that use
// them and go with the last one, so it holds only what held records name,
// and its bytes count against MaxRecordBytes. Shared values are never
// written to: output deep-copies.
type interner struct {
	m     map[string]*interned // kind byte + length-prefixed parts
	bytes int
	buf   []byte
}

func newInterner() *interner { return &interner{m: map[string]*interned{}} }

// keyLen is the length of the key for parts, to tell without building it
// whether they would be shared.
func keyLen(parts ...string) int {
	n := 1
	for _, p := range parts {
		n += uvarintLen(len(p)) + len(p)
	}
	return n
}

func uvarintLen(n int) int {
	l := 1
	for ; n >= 0x80; n >>= 7 {
		l++
	}
	return l
}

func (in *interner) key(kind byte, parts ...string) {
	in.buf = append(in.buf[:0], kind)
	for _, p := range parts {
		in.buf = binary.AppendUvarint(in.buf, uint64(len(p)))
		in.buf = append(in.buf, p...)
	}
}

// annParts flattens a map in key order, so equal maps share one entry.
func annParts(m map[string]string) []string {
	parts := make([]string, 0, 2*len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, k, m[k])
	}
	return parts
}

// split returns the n parts of a key, as substrings of it: a shared value
// holds the key's one allocation, never the caller's buffers.
func split(k string, n int) []string {
	parts := make([]string, 0, n)
	for i := 1; i < len(k); {
		l, w := binary.Uvarint([]byte(k[i:min(len(k), i+binary.MaxVarintLen64)]))
		i += w
		parts = append(parts, k[i:i+int(l)])
		i += int(l)
	}
	return parts
}

// acquire returns the shared entry for the key of n parts in in.buf, or
// nil when the value is too long to share.
func (in *interner) acquire(n int) *interned {
	if len(in.buf) > internMaxLen {
		return nil
	}
	if e := in.m[string(in.buf)]; e != nil {
		e.refs++
		return e
	}
	k := string(in.buf)
	parts := split(k, n)
	e := &interned{refs: 1, size: len(k) + internEntryBytes}
	switch k[0] {
	case 's':
		e.s = parts[0]
	case 'l':
		e.list, e.size = parts, e.size+sliceBytes+stringBytes*len(parts)
	case 'a':
		e.ann = make(map[string]string, len(parts)/2)
		for i := 0; i+1 < len(parts); i += 2 {
			e.ann[parts[i]] = parts[i+1]
		}
		e.size += mapBytes + internPairBytes*len(e.ann)
	}
	in.m[k] = e
	in.bytes += e.size
	return e
}

func (in *interner) release() {
	if len(in.buf) > internMaxLen {
		return
	}
	if e := in.m[string(in.buf)]; e != nil {
		if e.refs--; e.refs <= 0 {
			delete(in.m, string(in.buf))
			in.bytes -= e.size
		}
	}
}

func (in *interner) str(s *string) {
	if *s == "" {
		return
	}
	in.key('s', *s)
	if e := in.acquire(1); e != nil {
		*s = e.s
	}
}

func (in *interner) list(l *[]string) {
	if len(*l) == 0 {
		return
	}
	in.key('l', *l...)
	if e := in.acquire(len(*l)); e != nil {
		*l = e.list
	} else {
		*l = slices.Clone(*l)
	}
}

func (in *interner) ann(m *map[string]string) {
	if len(*m) == 0 {
		return
	}
	in.key('a', annParts(*m)...)
	if e := in.acquire(2 * len(*m)); e != nil {
		*m = e.ann
	} else {
		*m = maps.Clone(*m)
	}
}

// record shares r's repeated fields, copying those too long to share;
// releaseRecord undoes it when r goes.
func (in *interner) record(r *auditlog.ExecRecord) {
	for _, s := range sharedStrings(r) {
		in.str(s)
	}
	for _, l := range sharedLists(r) {
		in.list(l)
	}
	in.ann(&r.Annotations)
}

func (in *interner) releaseRecord(r *auditlog.ExecRecord) {
	for _, s := range sharedStrings(r) {
		if *s != "" {
			in.key('s', *s)
			in.release()
		}
	}
	for _, l := range sharedLists(r) {
		if len(*l) > 0 {
			in.key('l', *l...)
			in.release()
		}
	}
	if len(r.Annotations) > 0 {
		in.key('a', annParts(r.Annotations)...)
		in.release()
	}
}

// sharedStrings and sharedLists name the fields that repeat across records.
func sharedStrings(r *auditlog.ExecRecord) []*string {
	ss := []*string{&r.Verb, &r.Subresource, &r.User.Username, &r.User.UID, &r.UserAgent,
		&r.Namespace, &r.Pod, &r.Container, &r.Decision, &r.Reason}
	if u := r.ImpersonatedUser; u != nil {
		ss = append(ss, &u.Username, &u.UID)
	}
	return ss
}

func sharedLists(r *auditlog.ExecRecord) []*[]string {
	ls := []*[]string{&r.User.Groups, &r.SourceIPs, &r.Stages, &r.Flags}
	if u := r.ImpersonatedUser; u != nil {
		ls = append(ls, &u.Groups)
	}
	return ls
}
