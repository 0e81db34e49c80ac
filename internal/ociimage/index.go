package ociimage

import (
	"debug/elf"
	"errors"
	"fmt"
	"sort"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// LinuxPlatform is the platform of a linux image for a Go architecture
// (GOARCH). arm64 gets variant v8, as registries and `docker buildx` write
// linux/arm64; containerd matches it on arm64 nodes with or without one.
func LinuxPlatform(goarch string) v1.Platform {
	p := v1.Platform{OS: "linux", Architecture: goarch}
	if goarch == "arm64" {
		p.Variant = "v8"
	}
	return p
}

// WriteIndex builds one image per spec and writes them to path as an OCI
// image-layout archive whose index.json holds one OCI image index, named
// ref, with a manifest per platform: the form of a multi-architecture image
// in a registry, so that one reference serves every platform. Each spec
// needs its own Platform; the manifests are sorted by platform so the order
// of specs does not change a byte. The specs' Ref is not used: ref names
// the index, as Write's Spec.Ref names an image.
func WriteIndex(path, ref string, specs []Spec) error {
	if len(specs) == 0 {
		return errors.New("building image index: no images")
	}
	tag, err := refTag(ref)
	if err != nil {
		return err
	}
	specs = append([]Spec(nil), specs...)
	sort.Slice(specs, func(i, j int) bool { return specs[i].platform().String() < specs[j].platform().String() })
	adds := make([]mutate.IndexAddendum, 0, len(specs))
	for i, spec := range specs {
		plat := spec.platform()
		if i > 0 && specs[i-1].platform().Equals(plat) {
			return fmt.Errorf("building image index %s: platform %s given twice", ref, plat)
		}
		img, err := Image(spec)
		if err != nil {
			return fmt.Errorf("building image %s for %s: %w", ref, plat, err)
		}
		adds = append(adds, mutate.IndexAddendum{Add: img,
			Descriptor: v1.Descriptor{MediaType: types.OCIManifestSchema1, Platform: &plat}})
	}
	idx := mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex), adds...)
	return writeLayout(path, func(p layout.Path) error {
		if err := p.AppendIndex(idx, layout.WithAnnotations(refAnnotations(ref, tag))); err != nil {
			return fmt.Errorf("writing image index %s to layout: %w", ref, err)
		}
		return nil
	})
}

// elfMachines is the ELF machine of each Go architecture an image may be
// built for.
var elfMachines = map[string]elf.Machine{
	"386":     elf.EM_386,
	"amd64":   elf.EM_X86_64,
	"arm":     elf.EM_ARM,
	"arm64":   elf.EM_AARCH64,
	"ppc64le": elf.EM_PPC64,
	"riscv64": elf.EM_RISCV,
	"s390x":   elf.EM_S390,
}

// requireMachine fails unless path is an ELF file for goarch: an amd64
// binary in an arm64 image is what fails with `exec format error`.
func requireMachine(path, goarch string) error {
	want, ok := elfMachines[goarch]
	if !ok {
		return fmt.Errorf("checking %s: no ELF machine known for GOARCH %q", path, goarch)
	}
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("reading ELF %s: %w", path, err)
	}
	defer f.Close()
	if f.Machine != want {
		return fmt.Errorf("checking %s: ELF machine %s, want %s for %s", path, f.Machine, want, goarch)
	}
	return nil
}
