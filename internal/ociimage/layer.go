package ociimage

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// LayerTar returns the uncompressed layer tar of files: entries sorted by
// path, every missing parent directory added (0755), SourceDateEpoch mtimes, uid and
// gid 0. Paths are absolute in files and relative in the tar, as image
// layers write them. A path given twice is an error.
func LayerTar(files []File) ([]byte, error) {
	byPath := map[string]File{}
	for _, f := range files {
		if !path.IsAbs(f.Path) || path.Clean(f.Path) != f.Path || f.Path == "/" {
			return nil, fmt.Errorf("adding %q to layer: want a clean absolute path", f.Path)
		}
		if _, dup := byPath[f.Path]; dup {
			return nil, fmt.Errorf("adding %q to layer: given twice", f.Path)
		}
		byPath[f.Path] = f
	}
	for _, f := range files {
		for d := path.Dir(f.Path); d != "/"; d = path.Dir(d) {
			if p, ok := byPath[d]; ok {
				if !p.Dir {
					return nil, fmt.Errorf("adding %q to layer: parent %s is not a directory", f.Path, d)
				}
				continue
			}
			byPath[d] = File{Path: d, Dir: true}
		}
	}
	paths := make([]string, 0, len(byPath))
	for p := range byPath {
		paths = append(paths, p)
	}
	sort.Strings(paths)

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, p := range paths {
		if err := writeEntry(tw, byPath[p]); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("closing layer tar: %w", err)
	}
	return buf.Bytes(), nil
}

func writeEntry(tw *tar.Writer, f File) error {
	hdr := &tar.Header{Name: strings.TrimPrefix(f.Path, "/"), ModTime: epoch(), Format: tar.FormatPAX}
	data := f.Data
	switch {
	case f.Dir:
		hdr.Typeflag, hdr.Name, hdr.Mode = tar.TypeDir, hdr.Name+"/", 0o755
	case f.Link != "":
		hdr.Typeflag, hdr.Linkname, hdr.Mode = tar.TypeSymlink, f.Link, 0o777
	case f.Source != "":
		st, err := os.Stat(f.Source)
		if err != nil {
			return fmt.Errorf("reading %s for %s: %w", f.Source, f.Path, err)
		}
		if !st.Mode().IsRegular() {
			return fmt.Errorf("reading %s for %s: not a regular file", f.Source, f.Path)
		}
		if data, err = os.ReadFile(f.Source); err != nil {
			return fmt.Errorf("reading %s for %s: %w", f.Source, f.Path, err)
		}
		hdr.Typeflag, hdr.Mode = tar.TypeReg, int64(st.Mode().Perm())
	default:
		hdr.Typeflag, hdr.Mode = tar.TypeReg, 0o644
	}
	if f.Mode != 0 {
		hdr.Mode = int64(f.Mode.Perm())
		if f.Mode&os.ModeSetuid != 0 {
			hdr.Mode |= 0o4000
		}
		if f.Mode&os.ModeSetgid != 0 {
			hdr.Mode |= 0o2000
		}
		if f.Mode&os.ModeSticky != 0 {
			hdr.Mode |= 0o1000
		}
	}
	if hdr.Typeflag == tar.TypeReg {
		hdr.Size = int64(len(data))
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return fmt.Errorf("writing layer header for %s: %w", f.Path, err)
	}
	if hdr.Typeflag == tar.TypeReg {
		if _, err := tw.Write(data); err != nil {
			return fmt.Errorf("writing layer content for %s: %w", f.Path, err)
		}
	}
	return nil
}

// gzipLayer is a v1.Layer over an in-memory tar and its gzip form.
// go-containerregistry's tarball layers pull in estargz; this does not, and
// its gzip stream is deterministic (no header name or time).
type gzipLayer struct {
	uncompressed, compressed []byte
	digest, diffID           v1.Hash
}

func newGzipLayer(uncompressed []byte) (*gzipLayer, error) {
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.DefaultCompression)
	if err != nil {
		return nil, fmt.Errorf("creating gzip writer: %w", err)
	}
	if _, err := zw.Write(uncompressed); err != nil {
		return nil, fmt.Errorf("compressing layer: %w", err)
	}
	if err := zw.Close(); err != nil {
		return nil, fmt.Errorf("compressing layer: %w", err)
	}
	l := &gzipLayer{uncompressed: uncompressed, compressed: buf.Bytes()}
	if l.digest, _, err = v1.SHA256(bytes.NewReader(l.compressed)); err != nil {
		return nil, fmt.Errorf("hashing layer: %w", err)
	}
	if l.diffID, _, err = v1.SHA256(bytes.NewReader(l.uncompressed)); err != nil {
		return nil, fmt.Errorf("hashing layer: %w", err)
	}
	return l, nil
}

func (l *gzipLayer) Digest() (v1.Hash, error) { return l.digest, nil }
func (l *gzipLayer) DiffID() (v1.Hash, error) { return l.diffID, nil }
func (l *gzipLayer) Size() (int64, error)     { return int64(len(l.compressed)), nil }
func (l *gzipLayer) MediaType() (types.MediaType, error) {
	return types.OCILayer, nil
}
func (l *gzipLayer) Compressed() (io.ReadCloser, error) {
	return io.NopCloser(bytes.NewReader(l.compressed)), nil
}
func (l *gzipLayer) Uncompressed() (io.ReadCloser, error) {
	return io.NopCloser(bytes.NewReader(l.uncompressed)), nil
}
