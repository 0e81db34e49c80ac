package join

import (
	"slices"

	"github.com/execid/correlator/pkg/capture"
)

// procImage is what an exec ran: a session's hundred `sleep`s, or a
// container's workers, share one copy (images), so a held process keeps a
// pointer, not the 60 bytes of these fields and its own filename.
type procImage struct {
	Filename      string
	Argv          []string // never written to
	ArgvTruncated bool
	ExecOrigin    capture.Origin
	key           string // in images.m, "" for an image too long to share
	refs          int
	size          int
}

// imageFixedBytes is a shared procImage's heap beyond its key and argv
// header: the struct and its map slot.
const imageFixedBytes = 96 + 48

// images interns procImage as shares does sharedFields: it holds only what
// held processes use, and its bytes count against MaxProcessBytes. An image
// longer than internMaxLen is rare and distinct: its process keeps (and is
// charged for) its own.
type images struct {
	m     map[string]*procImage
	bytes int
	buf   []byte
}

func newImages() *images { return &images{m: map[string]*procImage{}} }

// acquire returns the image of in, counting one more user.
func (t *images) acquire(in *Process) *procImage {
	b := appendStrings(t.buf[:0], in.Filename, string(in.ExecOrigin))
	// Bit 1: argv is not nil (an empty one is output as it came).
	b = appendList(append(b, boolByte(in.ArgvTruncated)|boolByte(in.Argv != nil)<<1), in.Argv)
	t.buf = b
	if len(b) > internMaxLen {
		return &procImage{Filename: in.Filename, Argv: slices.Clone(in.Argv), ArgvTruncated: in.ArgvTruncated,
			ExecOrigin: in.ExecOrigin}
	}
	if img := t.m[string(b)]; img != nil {
		img.refs++
		return img
	}
	k := string(b)
	d := keyReader{k: k}
	img := &procImage{Filename: d.str(), ExecOrigin: capture.Origin(d.str()), key: k, refs: 1}
	bits := k[d.i]
	d.i++
	img.ArgvTruncated, img.Argv = bits&1 != 0, d.list()
	if img.Argv == nil && bits&2 != 0 {
		img.Argv = []string{}
	}
	img.size = imageFixedBytes + len(k) + listHeaderBytes(img.Argv)
	t.m[k] = img
	t.bytes += img.size
	return img
}

// release drops one user of img, forgetting it with the last.
func (t *images) release(img *procImage) {
	if img.key == "" {
		return
	}
	if img.refs--; img.refs <= 0 {
		delete(t.m, img.key)
		t.bytes -= img.size
	}
}

// ownBytes is what img costs its one process when it is not shared.
func (img *procImage) ownBytes() int {
	if img.key != "" {
		return 0
	}
	return imageFixedBytes + len(img.Filename) + len(img.ExecOrigin) + listBytes(img.Argv)
}
