#!/usr/bin/env bash
# fetch.sh [ARCH:]KERNEL: download and unpack a Debian kernel for the matrix
# into the cache ($KERNEL_CACHE, outside the checkout), and print its
# directory. ARCH is amd64 (the default: "6.1" is "amd64:6.1") or arm64.
#
# Each kernel gets its own sources list and apt state under the cache, so the
# machine's apt setup (/etc/apt, /var/lib/apt) is never touched. The suite's
# linux-image-ARCH metapackage names the kernel package; what it resolves to
# is recorded in <dir>/version. A kernel already unpacked is reused
# (E2E_KERNELS_REFRESH=1 fetches again). amd64 kernels live in <cache>/KERNEL,
# arm64 ones in <cache>/arm64-KERNEL.
#
#   5.10  bullseye   6.1  bookworm (+ bookworm-security)   6.12  trixie
set -euo pipefail

spec=${1:?usage: fetch.sh [amd64:|arm64:]5.10|6.1|6.12}
cache=${KERNEL_CACHE:-/var/cache/correlator-e2e-kernels}
arch=amd64 kernel=$spec
[[ $spec != *:* ]] || { arch=${spec%%:*}; kernel=${spec#*:}; }
case $arch in
amd64 | arm64) ;;
*) echo "fetch: unknown architecture $arch in $spec (known: amd64 arm64)" >&2; exit 2 ;;
esac
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=scripts/e2e-kernels/mirror.sh
. "$here/mirror.sh"

case $kernel in
5.10) suite=bullseye ;;
6.1) suite=bookworm ;; # 6.1's point releases land in bookworm-security first
6.12) suite=trixie ;;
*) echo "fetch: unknown kernel $kernel in $spec (known: 5.10 6.1 6.12)" >&2; exit 2 ;;
esac

dir=$cache/$kernel
[[ $arch == amd64 ]] || dir=$cache/$arch-$kernel
if [[ -f $dir/ready && ${E2E_KERNELS_REFRESH:-0} != 1 ]]; then
	echo "$dir"
	exit 0
fi
[[ -n $mirror ]] || { echo "fetch: no Debian archive in the machine's apt sources; set DEBIAN_MIRROR" >&2; exit 1; }
[[ -n $security || $kernel != 6.1 ]] || { echo "fetch: no -security suite in the machine's apt sources; set DEBIAN_SECURITY_MIRROR" >&2; exit 1; }
rm -rf "$dir"
mkdir -p "$dir/apt/lists/partial" "$dir/apt/cache/archives/partial" "$dir/deb"
{
	echo "deb [arch=$arch signed-by=$keyring] $mirror $suite main"
	[[ $kernel != 6.1 ]] || echo "deb [arch=$arch signed-by=$keyring] $security $suite-security main"
} >"$dir/apt/sources.list"

apt_opts=(
	-o "Dir::Etc::SourceList=$dir/apt/sources.list"
	-o Dir::Etc::SourceParts=/dev/null
	-o Dir::Etc::Preferences=/dev/null
	-o Dir::Etc::PreferencesParts=/dev/null
	-o "Dir::State::Lists=$dir/apt/lists"
	-o "Dir::Cache=$dir/apt/cache"
	-o Debug::NoLocking=1
	-o APT::Sandbox::User=root
	-o "APT::Architecture=$arch"
	-o "APT::Architectures=$arch"
)
echo "fetch: $spec: apt-get update ($suite, $arch)" >&2
apt-get "${apt_opts[@]}" update -qq >&2
pkg=$(apt-cache "${apt_opts[@]}" depends "linux-image-$arch" |
	awk '$1 == "Depends:" && $2 ~ /^linux-image-[0-9]/ { sub(/:.*/, "", $2); print $2; exit }')
if [[ -z $pkg ]]; then
	echo "fetch: $spec: linux-image-$arch in $suite names no kernel package" >&2
	exit 1
fi
echo "fetch: $spec: apt-get download $pkg" >&2
(cd "$dir/deb" && apt-get "${apt_opts[@]}" download -qq "$pkg" >&2)
deb=$(ls "$dir"/deb/*.deb)
dpkg-deb -x "$deb" "$dir/root"

vmlinuz=$(ls "$dir"/root/boot/vmlinuz-*)
release=${vmlinuz##*/vmlinuz-}
mods=$dir/root/lib/modules/$release
[[ -d $mods ]] || mods=$dir/root/usr/lib/modules/$release
if [[ ! -d $mods ]]; then
	echo "fetch: $spec: no modules for $release in $deb" >&2
	exit 1
fi
# 6.12 ships .ko.xz; the initramfs's insmod and the guest's modprobe get
# plain .ko files (and a modules.dep that names them).
find "$mods" -name '*.ko.xz' -print0 | xargs -0 -r -n 64 -P "$(nproc)" xz -d
depmod -b "$dir/root" "$release" 2>/dev/null || depmod -b "$dir/root/usr" "$release"
ln -sfn "$vmlinuz" "$dir/vmlinuz"
ln -sfn "$mods" "$dir/modules"
printf '%s %s\n' "$pkg" "$(dpkg-deb -f "$deb" Version)" >"$dir/version"
rm -rf "$dir/deb" "$dir/apt/cache"
touch "$dir/ready"
echo "$dir"
