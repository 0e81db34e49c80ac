// Command mkimage writes an OCI image-layout archive offline (no Docker, no
// registry), for `make image` and the node harness:
//
//	go run ./internal/ociimage/cmd/mkimage -kind correlator -binary bin/correlator -ref ghcr.io/execid/correlator:dev -o bin/correlator.oci.tar
//	go run ./internal/ociimage/cmd/mkimage -kind correlator -arch amd64=bin/correlator-static-amd64 -arch arm64=bin/correlator-static-arm64 -ref ghcr.io/execid/correlator:dev -o bin/correlator.oci.tar
//	go run ./internal/ociimage/cmd/mkimage -kind busybox -o busybox.oci.tar
//	go run ./internal/ociimage/cmd/mkimage -kind pause -o pause.oci.tar
//
// -binary writes one image for the build machine's architecture; -arch,
// given once per architecture, writes one image index with an image for
// each (ociimage.WriteCorrelatorIndex), which is what `make image` does.
// Import the archive with `ctr -n k8s.io images import <archive>`.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/execid/correlator/internal/ociimage"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "mkimage:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("mkimage", flag.ContinueOnError)
	kind := fs.String("kind", "correlator", "image to build: correlator, busybox or pause")
	out := fs.String("o", "", "archive to write (required)")
	binary := fs.String("binary", "bin/correlator", "correlator's static binary (kind correlator)")
	ref := fs.String("ref", ociimage.CorrelatorRef, "image reference (kind correlator)")
	var arches []ociimage.Binary
	fs.Func("arch", "correlator's static binary for one architecture, as `GOARCH=PATH`; repeat it for an image index over several (kind correlator; -binary is then unused)", func(v string) error {
		arch, path, ok := strings.Cut(v, "=")
		if !ok || arch == "" || path == "" {
			return fmt.Errorf("want GOARCH=PATH, got %q", v)
		}
		arches = append(arches, ociimage.Binary{Arch: arch, Path: path})
		return nil
	})
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *out == "" {
		return fmt.Errorf("parsing flags: -o is required")
	}
	var err error
	switch {
	case *kind == "correlator" && len(arches) > 0:
		err = ociimage.WriteCorrelatorIndex(*out, *ref, arches)
	case *kind == "correlator":
		err = ociimage.WriteCorrelator(*out, *ref, *binary)
	case *kind == "busybox":
		err = ociimage.Busybox(*out)
	case *kind == "pause":
		err = ociimage.Pause(*out)
	default:
		return fmt.Errorf("parsing flags: unknown -kind %q", *kind)
	}
	if err != nil {
		return err
	}
	fmt.Println(*out)
	return nil
}
