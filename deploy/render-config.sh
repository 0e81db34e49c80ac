#!/usr/bin/env bash
# deploy/render-config.sh: print the node agent's config file as the Helm
# chart renders it, for `correlator run --config`. Arguments go to
# `helm template`, e.g. to run the agent on this machine instead of in a pod:
#
#   deploy/render-config.sh --set agent.config.proc-root=/proc \
#       --set agent.config.listen=127.0.0.1:8080 > /tmp/correlator.yaml
#   correlator run --config /tmp/correlator.yaml --token-file /tmp/token
#
# helm is built at its pinned version (deploy/helm.go) on first use.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
exec go run ./deploy/cmd/render-config -- "$@"
