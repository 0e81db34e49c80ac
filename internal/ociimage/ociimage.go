// Package ociimage builds container images offline, with no Docker engine
// and no registry: one gzip layer made from local files, an OCI image
// config, written as an OCI image-layout archive (a tar of the layout
// directory), which is what `ctr images import` and containerd's import API
// accept. Every byte is deterministic: fixed timestamps, sorted entries,
// uid and gid 0, no user or group names, gzip with no header time.
//
// Pause, Busybox and Correlator build the three images the node harness
// (internal/nodeharness) imports into its containerd; Write builds any other.
// WriteIndex writes one image per platform under one reference (an OCI
// image index), as WriteCorrelatorIndex does for `make image`.
package ociimage

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// SourceDateEpoch is every timestamp in an image, in Unix seconds: the
// config's created time, the history entry's, and the mtime of every file in
// the layer and in the archive.
const SourceDateEpoch = 0

func epoch() time.Time { return time.Unix(SourceDateEpoch, 0).UTC() }

// The annotations on an image's descriptor in index.json that name it.
// containerd's importer takes io.containerd.image.name first, then a full
// reference in org.opencontainers.image.ref.name; its own exporter writes
// the full name in the first and only the tag in the second, as the OCI
// image-layout spec has it. So do we.
const (
	AnnotationImageName = "io.containerd.image.name"
	AnnotationRefName   = "org.opencontainers.image.ref.name"
)

// File is one entry of the image's single layer. Exactly one of Data,
// Source, Link or Dir says what it is.
type File struct {
	// Path is absolute inside the image, e.g. /bin/busybox.
	Path string
	// Mode is the permission bits (and setuid/setgid/sticky). Zero means
	// 0755 for a directory, the source file's bits for Source, 0644 for Data.
	Mode fs.FileMode
	// Data is a regular file's content.
	Data []byte
	// Source is a host file copied in as a regular file.
	Source string
	// Link makes a symbolic link pointing at Link.
	Link string
	// Dir makes a directory.
	Dir bool
}

// Spec describes an image. Zero values are left out of the config.
type Spec struct {
	// Ref is the full reference the import names the image by, e.g.
	// docker.io/library/busybox:e2e. Required.
	Ref        string
	Files      []File
	Entrypoint []string
	Cmd        []string
	Env        []string
	User       string
	WorkingDir string
	Labels     map[string]string
	// CreatedBy is the history entry's description.
	CreatedBy string
	// Platform is the OS, architecture and variant of the image's config
	// and of its descriptor. The zero value is linux on the build
	// machine's architecture (runtime.GOARCH); LinuxPlatform names others.
	Platform v1.Platform
}

// platform is spec.Platform, or linux/runtime.GOARCH when it is zero.
func (spec Spec) platform() v1.Platform {
	if spec.Platform.OS == "" && spec.Platform.Architecture == "" {
		return LinuxPlatform(runtime.GOARCH)
	}
	return spec.Platform
}

// Write builds spec's image and writes it to path as an OCI image-layout
// archive, replacing any file there.
func Write(path string, spec Spec) error {
	if spec.Ref == "" {
		return errors.New("building image: no reference")
	}
	tag, err := refTag(spec.Ref)
	if err != nil {
		return err
	}
	img, err := Image(spec)
	if err != nil {
		return err
	}
	return writeLayout(path, func(p layout.Path) error {
		err := p.AppendImage(img, layout.WithAnnotations(refAnnotations(spec.Ref, tag)), layout.WithPlatform(spec.platform()))
		if err != nil {
			return fmt.Errorf("writing image %s to layout: %w", spec.Ref, err)
		}
		return nil
	})
}

// refAnnotations name an image or an index in index.json (see
// AnnotationImageName).
func refAnnotations(ref, tag string) map[string]string {
	return map[string]string{AnnotationImageName: ref, AnnotationRefName: tag}
}

// writeLayout writes an OCI image layout with add in a temporary directory
// beside path, then archives it to path.
func writeLayout(path string, add func(layout.Path) error) error {
	dir, err := os.MkdirTemp(filepath.Dir(path), ".ociimage-*")
	if err != nil {
		return fmt.Errorf("creating layout directory: %w", err)
	}
	defer os.RemoveAll(dir)
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("writing image layout %s: %w", dir, err)
	}
	if err := add(p); err != nil {
		return err
	}
	return tarDir(dir, path)
}

// Image builds spec's image in memory: an OCI manifest, an OCI config and
// one gzip layer.
func Image(spec Spec) (v1.Image, error) {
	layerTar, err := LayerTar(spec.Files)
	if err != nil {
		return nil, err
	}
	l, err := newGzipLayer(layerTar)
	if err != nil {
		return nil, err
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	plat := spec.platform()
	img, err = mutate.ConfigFile(img, &v1.ConfigFile{
		Architecture: plat.Architecture,
		OS:           plat.OS,
		Variant:      plat.Variant,
		Created:      v1.Time{Time: epoch()},
		Config: v1.Config{
			Entrypoint: spec.Entrypoint,
			Cmd:        spec.Cmd,
			Env:        spec.Env,
			User:       spec.User,
			WorkingDir: spec.WorkingDir,
			Labels:     spec.Labels,
		},
		RootFS: v1.RootFS{Type: "layers"},
	})
	if err != nil {
		return nil, fmt.Errorf("setting image config: %w", err)
	}
	img, err = mutate.Append(img, mutate.Addendum{
		Layer:     l,
		MediaType: types.OCILayer,
		History:   v1.History{Created: v1.Time{Time: epoch()}, CreatedBy: spec.CreatedBy},
	})
	if err != nil {
		return nil, fmt.Errorf("appending layer: %w", err)
	}
	return img, nil
}

// refTag is the tag of a full reference: what follows the last ':' after
// the last '/'. A reference without a tag is an error: the importer would
// name it by digest only.
func refTag(ref string) (string, error) {
	if strings.Contains(ref, "@") {
		return "", fmt.Errorf("parsing reference %q: digest references are not supported", ref)
	}
	name := ref[strings.LastIndex(ref, "/")+1:]
	i := strings.LastIndex(name, ":")
	if i < 0 || i == len(name)-1 || !strings.Contains(ref, "/") {
		return "", fmt.Errorf("parsing reference %q: want registry/repository:tag", ref)
	}
	return name[i+1:], nil
}

// tarDir writes dir's tree to the tar archive path, entries sorted, with
// SourceDateEpoch mtimes and root ownership.
func tarDir(dir, path string) error {
	var names []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != dir {
			names = append(names, p)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("walking image layout %s: %w", dir, err)
	}
	sort.Strings(names)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, p := range names {
		st, err := os.Lstat(p)
		if err != nil {
			return fmt.Errorf("reading %s: %w", p, err)
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return fmt.Errorf("naming %s in the archive: %w", p, err)
		}
		hdr := &tar.Header{Name: filepath.ToSlash(rel), ModTime: epoch(), Format: tar.FormatPAX}
		switch {
		case st.IsDir():
			hdr.Typeflag, hdr.Name, hdr.Mode = tar.TypeDir, hdr.Name+"/", 0o755
		case st.Mode().IsRegular():
			hdr.Typeflag, hdr.Mode, hdr.Size = tar.TypeReg, 0o644, st.Size()
		default:
			return fmt.Errorf("archiving %s: not a file or directory", p)
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return fmt.Errorf("writing archive header for %s: %w", hdr.Name, err)
		}
		if hdr.Typeflag == tar.TypeReg {
			if err := copyFile(tw, p); err != nil {
				return err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("closing archive: %w", err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("writing image archive %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("renaming image archive to %s: %w", path, err)
	}
	return nil
}

func copyFile(w io.Writer, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("opening %s: %w", path, err)
	}
	defer f.Close()
	if _, err := io.Copy(w, f); err != nil {
		return fmt.Errorf("copying %s: %w", path, err)
	}
	return nil
}
