package ociimage

import (
	"bytes"
	"debug/elf"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// indexRef names the test's image index; the tag is what
// org.opencontainers.image.ref.name must say.
const indexRef = "registry.example/execid/correlator:multi"

// indexBinaries builds the pause program for linux/amd64 and linux/arm64:
// real static executables of each ELF machine, standing in for
// correlator's. The arm64 one is a cross build, about 8 s on a cold build
// cache and well under one on a warm one.
func indexBinaries(t *testing.T) []Binary {
	t.Helper()
	if _, err := goCommand(); err != nil {
		t.Skip(err)
	}
	dir := t.TempDir()
	var bins []Binary
	for _, arch := range []string{"arm64", "amd64"} { // out of order: WriteIndex sorts
		bin, err := buildPause(dir, arch)
		if err != nil {
			t.Fatal(err)
		}
		bins = append(bins, Binary{Arch: arch, Path: bin})
	}
	return bins
}

// readIndex unpacks an archive written by WriteIndex and returns the image
// index that its index.json names ref: the only descriptor there, an OCI
// image index carrying both reference annotations and no platform.
func readIndex(t *testing.T, archive, ref string) v1.ImageIndex {
	t.Helper()
	dir := unpackArchive(t, archive)
	checkBlobs(t, dir)
	top, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatalf("reading layout: %v", err)
	}
	im, err := top.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 {
		t.Fatalf("index.json has %d descriptors, want 1", len(im.Manifests))
	}
	desc := im.Manifests[0]
	if desc.MediaType != types.OCIImageIndex {
		t.Errorf("index.json descriptor media type %s, want %s", desc.MediaType, types.OCIImageIndex)
	}
	tag := ref[strings.LastIndex(ref, ":")+1:]
	if desc.Annotations[AnnotationImageName] != ref || desc.Annotations[AnnotationRefName] != tag {
		t.Errorf("index.json descriptor annotations %v, want %s=%s and %s=%s",
			desc.Annotations, AnnotationImageName, ref, AnnotationRefName, tag)
	}
	if desc.Platform != nil {
		t.Errorf("index.json descriptor has platform %v, want none (the index spans platforms)", desc.Platform)
	}
	idx, err := top.ImageIndex(desc.Digest)
	if err != nil {
		t.Fatalf("reading image index %s: %v", desc.Digest, err)
	}
	if mt, _ := idx.MediaType(); mt != types.OCIImageIndex {
		t.Errorf("image index media type %s, want %s", mt, types.OCIImageIndex)
	}
	return idx
}

// checkBlobs checks that every blob under dir's blobs/sha256 is named by
// its own digest.
func checkBlobs(t *testing.T, dir string) {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(dir, "blobs", "sha256", "*"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("listing blobs: %v, %d found", err, len(paths))
	}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		h, _, err := v1.SHA256(bytes.NewReader(b))
		if err != nil || h.Hex != filepath.Base(p) {
			t.Errorf("blob %s has digest %s (%v)", filepath.Base(p), h.Hex, err)
		}
	}
}

// TestCorrelatorIndex writes correlator's image for amd64 and arm64 under
// one reference and reads it back with go-containerregistry's layout
// reader: exactly linux/amd64 and linux/arm64/v8, each config naming its
// architecture, each layer's /usr/local/bin/correlator an ELF of that
// machine; then a second build, from the binaries given in the other
// order, is the same archive byte for byte.
func TestCorrelatorIndex(t *testing.T) {
	bins := indexBinaries(t)
	dir := t.TempDir()
	archive := filepath.Join(dir, "correlator.oci.tar")
	if err := WriteCorrelatorIndex(archive, indexRef, bins); err != nil {
		t.Fatal(err)
	}
	idx := readIndex(t, archive, indexRef)
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		platform v1.Platform
		machine  elf.Machine
		binary   string
	}{
		{v1.Platform{OS: "linux", Architecture: "amd64"}, elf.EM_X86_64, bins[1].Path},
		{v1.Platform{OS: "linux", Architecture: "arm64", Variant: "v8"}, elf.EM_AARCH64, bins[0].Path},
	}
	if len(im.Manifests) != len(want) {
		t.Fatalf("image index has %d manifests, want %d", len(im.Manifests), len(want))
	}
	layers := map[v1.Hash]bool{}
	for i, w := range want {
		desc := im.Manifests[i]
		if desc.Platform == nil || !desc.Platform.Equals(w.platform) {
			t.Errorf("manifest %d: platform %v, want %v", i, desc.Platform, w.platform)
		}
		if desc.MediaType != types.OCIManifestSchema1 {
			t.Errorf("manifest %d: media type %s, want %s", i, desc.MediaType, types.OCIManifestSchema1)
		}
		img, err := idx.Image(desc.Digest)
		if err != nil {
			t.Fatalf("reading the %s image: %v", w.platform, err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cf.OS != w.platform.OS || cf.Architecture != w.platform.Architecture || cf.Variant != w.platform.Variant {
			t.Errorf("%s config: os %q architecture %q variant %q", w.platform, cf.OS, cf.Architecture, cf.Variant)
		}
		if !slices.Equal(cf.Config.Entrypoint, []string{"/usr/local/bin/correlator"}) ||
			!slices.Equal(cf.Config.Cmd, []string{"--help"}) || cf.Config.User != "65532:65532" {
			t.Errorf("%s config: entrypoint %q cmd %q user %q", w.platform, cf.Config.Entrypoint, cf.Config.Cmd, cf.Config.User)
		}
		ls, err := img.Layers()
		if err != nil || len(ls) != 1 {
			t.Fatalf("%s image: %d layers (%v), want 1", w.platform, len(ls), err)
		}
		d, _ := ls[0].Digest()
		layers[d] = true
		e := files(t, img)["/usr/local/bin/correlator"]
		bin, err := os.ReadFile(w.binary)
		if err != nil {
			t.Fatal(err)
		}
		if e.mode != 0o755 || !bytes.Equal(e.data, bin) {
			t.Errorf("%s /usr/local/bin/correlator: mode %o, %d bytes; want %s's %d bytes, 0755", w.platform, e.mode, len(e.data), w.binary, len(bin))
		}
		f, err := elf.NewFile(bytes.NewReader(e.data))
		if err != nil {
			t.Fatalf("%s /usr/local/bin/correlator: %v", w.platform, err)
		}
		if f.Machine != w.machine {
			t.Errorf("%s /usr/local/bin/correlator: ELF machine %s, want %s", w.platform, f.Machine, w.machine)
		}
	}
	if len(layers) != len(want) {
		t.Errorf("%d distinct layers, want one per platform", len(layers))
	}

	again := filepath.Join(dir, "again.oci.tar")
	if err := WriteCorrelatorIndex(again, indexRef, []Binary{bins[1], bins[0]}); err != nil {
		t.Fatal(err)
	}
	a, _ := os.ReadFile(archive)
	b, _ := os.ReadFile(again)
	if !bytes.Equal(a, b) {
		t.Errorf("two builds differ: %d and %d bytes", len(a), len(b))
	}
}

// TestCorrelatorIndexRejects checks that a binary of the wrong machine, an
// architecture given twice and other mistakes fail the build instead of
// shipping an image that fails with `exec format error`.
func TestCorrelatorIndexRejects(t *testing.T) {
	bins := indexBinaries(t)
	arm64, amd64 := bins[0].Path, bins[1].Path
	other := amd64
	if runtime.GOARCH == "amd64" {
		other = arm64
	}
	archive := filepath.Join(t.TempDir(), "c.oci.tar")
	for name, tc := range map[string]struct {
		write func() error
		want  string
	}{
		"amd64 binary as arm64": {func() error {
			return WriteCorrelatorIndex(archive, indexRef, []Binary{{"amd64", amd64}, {"arm64", amd64}})
		}, "GOARCH=arm64"},
		"arch twice": {func() error {
			return WriteCorrelatorIndex(archive, indexRef, []Binary{{"arm64", arm64}, {"arm64", arm64}})
		}, "given twice"},
		"unknown arch": {func() error {
			return WriteCorrelatorIndex(archive, indexRef, []Binary{{"vax", amd64}})
		}, "no ELF machine"},
		"no binaries": {func() error {
			return WriteCorrelatorIndex(archive, indexRef, nil)
		}, "no images"},
		"no tag": {func() error {
			return WriteCorrelatorIndex(archive, "registry.example/execid/correlator", bins)
		}, "registry/repository:tag"},
		"single-arch image of another machine": {func() error {
			return WriteCorrelator(archive, indexRef, other)
		}, "GOARCH=" + runtime.GOARCH},
	} {
		err := tc.write()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error saying %q", name, err, tc.want)
		}
	}
	if _, err := os.Stat(archive); !os.IsNotExist(err) {
		t.Errorf("a rejected build left %s: %v", archive, err)
	}
}

// TestSpecPlatform checks that a Spec's Platform reaches the single-arch
// image's config and index.json descriptor, and that its zero value is
// the build machine's architecture.
func TestSpecPlatform(t *testing.T) {
	for _, p := range []v1.Platform{{}, LinuxPlatform("arm64")} {
		archive := filepath.Join(t.TempDir(), "x.oci.tar")
		err := Write(archive, Spec{Ref: indexRef, Files: []File{{Path: "/x", Data: []byte("x")}}, Platform: p})
		if err != nil {
			t.Fatal(err)
		}
		want := p
		if p.OS == "" {
			want = v1.Platform{OS: "linux", Architecture: runtime.GOARCH}
			if runtime.GOARCH == "arm64" {
				want.Variant = "v8"
			}
		}
		desc, img := readArchive(t, archive)
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if desc.Platform == nil || !desc.Platform.Equals(want) || !cf.Platform().Equals(want) {
			t.Errorf("Platform %v: descriptor %v, config %v; want %v", p, desc.Platform, cf.Platform(), want)
		}
	}
}
