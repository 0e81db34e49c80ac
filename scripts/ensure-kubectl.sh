#!/usr/bin/env bash
# ensure-kubectl.sh [strict]: `make deps`' kubectl. The tests run the real
# kubectl, and its exec must speak WebSockets (kubectl >= 1.30); Debian's
# kubernetes-client is 1.20. A kubectl that new on PATH is used as it is;
# otherwise this builds the kubectl of the release test/kubeapi pins
# (testdata/kubectl, about a minute) into /usr/local/bin as root, else into
# bin/ with what to do. strict=1 makes "not on PATH" an error.
set -euo pipefail
cd "$(dirname "$0")/.."
min=30
strict=${1:-0}
GO=${GO:-go}

if k=$(command -v kubectl); then
	v=$(kubectl version --client -o json 2>/dev/null | jq -r '.clientVersion | "\(.major).\(.minor)"' || true)
	minor=$(printf '%s' "${v#*.}" | tr -dc 0-9)
	if [ "${v%%.*}" = 1 ] && [ "${minor:-0}" -ge "$min" ]; then
		echo "deps: kubectl $v at $k"
		exit 0
	fi
	echo "deps: $k is kubectl ${v:-of unknown version}, older than 1.$min (no WebSocket exec): building a newer one"
else
	echo "deps: no kubectl on PATH: building one"
fi

ver=$(awk '$1 == "k8s.io/kubernetes" { print $2; exit }' test/kubeapi/go.mod)
minor=${ver#v1.}
minor=${minor%%.*}
if [ "$(id -u)" = 0 ]; then dest=/usr/local/bin; else dest=$PWD/bin; fi
mkdir -p "$dest"
(cd test/kubeapi && CGO_ENABLED=0 "$GO" build -trimpath \
	-ldflags "-X k8s.io/component-base/version.gitVersion=$ver -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor" \
	-o "$dest/kubectl" ./testdata/kubectl)
echo "deps: built kubectl $ver into $dest/kubectl"
if [ "$(command -v kubectl || true)" != "$dest/kubectl" ]; then
	echo "deps: $dest is not first on PATH for kubectl; put it there: export PATH=$dest:\$PATH" >&2
	if [ "$strict" = 1 ]; then exit 1; fi
fi
