#!/usr/bin/env bash
# scripts/image.sh: correlator's container image as an OCI image-layout
# archive, built offline (no Docker engine, no registry) by
# internal/ociimage: the static binary at /usr/local/bin/correlator as the
# entrypoint, --help as the default arguments, uid 65532, as the Dockerfile
# builds it on distroless. Byte-for-byte reproducible for a given binary.
#
#   IMAGE=ghcr.io/execid/correlator:dev OUT=bin/correlator.oci.tar scripts/image.sh
#   ctr -n k8s.io images import bin/correlator.oci.tar    # on a node
#   skopeo copy oci-archive:bin/correlator.oci.tar docker://...   # to a registry
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

GO=${GO:-go}
IMAGE=${IMAGE:-ghcr.io/execid/correlator:dev}
OUT=${OUT:-bin/correlator.oci.tar}
BIN=${BIN:-bin/correlator-static}

mkdir -p "$(dirname "$BIN")" "$(dirname "$OUT")"
# CGO-free, as in the Dockerfile: the image has no libc.
CGO_ENABLED=0 "$GO" build -trimpath -ldflags "-s -w" -o "$BIN" ./cmd/correlator
"$GO" run ./internal/ociimage/cmd/mkimage -kind correlator -binary "$BIN" -ref "$IMAGE" -o "$OUT" >/dev/null
echo "image: $IMAGE -> $OUT ($(du -h "$OUT" | cut -f1)); import with: ctr -n k8s.io images import $OUT"
