#!/usr/bin/env bash
# scripts/image.sh: correlator's container image for linux/amd64 and
# linux/arm64 under one reference, as an OCI image-layout archive, built
# offline (no Docker engine, no registry, no emulator) by internal/ociimage.
#
# It cross-builds one static binary per architecture in ARCHES
# (CGO_ENABLED=0 GOOS=linux GOARCH=..., -trimpath -ldflags "-s -w"), to
# $BIN-amd64 and $BIN-arm64, and writes ONE archive whose index.json names
# one OCI image index (org.opencontainers.image.ref.name = the tag,
# io.containerd.image.name = IMAGE) with a manifest per platform:
# linux/amd64 and linux/arm64 (variant v8), each with its own layer holding
# its binary at /usr/local/bin/correlator as the entrypoint, --help as the
# default arguments, uid 65532, as the Dockerfile builds it on distroless.
# A node pulls the one reference and its runtime picks its own platform's
# manifest. Byte-for-byte reproducible for given binaries.
#
#   IMAGE=ghcr.io/execid/correlator:dev OUT=bin/correlator.oci.tar scripts/image.sh
#   ARCHES=arm64 scripts/image.sh             # an index of one platform
#   ctr -n k8s.io images import bin/correlator.oci.tar    # on a node: its own platform
#   skopeo copy --all oci-archive:bin/correlator.oci.tar docker://registry.example/execid/correlator:TAG
#
# docs/install.md ("Publishing the image") has the crane equivalent.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

GO=${GO:-go}
IMAGE=${IMAGE:-ghcr.io/execid/correlator:dev}
OUT=${OUT:-bin/correlator.oci.tar}
BIN=${BIN:-bin/correlator-static}
ARCHES=${ARCHES:-amd64 arm64}

[[ -n ${ARCHES// /} ]] || { echo "image: ARCHES is empty: name at least one GOARCH (amd64 arm64)" >&2; exit 1; }
mkdir -p "$(dirname "$BIN")" "$(dirname "$OUT")"
args=()
for arch in $ARCHES; do
	# CGO-free, as in the Dockerfile: the image has no libc. A cross build
	# needs no C toolchain for that reason.
	CGO_ENABLED=0 GOOS=linux GOARCH=$arch "$GO" build -trimpath -ldflags "-s -w" -o "$BIN-$arch" ./cmd/correlator
	args+=(-arch "$arch=$BIN-$arch")
done
"$GO" run ./internal/ociimage/cmd/mkimage -kind correlator "${args[@]}" -ref "$IMAGE" -o "$OUT" >/dev/null
echo "image: $IMAGE ($(echo "$ARCHES" | sed 's/[^ ][^ ]*/linux\/&/g')) -> $OUT ($(du -h "$OUT" | cut -f1)); import with: ctr -n k8s.io images import $OUT"
