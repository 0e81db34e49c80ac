#!/usr/bin/env bash
# fetch.sh KERNEL: download and unpack a Debian kernel for the matrix into the
# cache ($KERNEL_CACHE, outside the checkout), and print its directory.
#
# Each kernel gets its own sources list and apt state under the cache, so the
# machine's apt setup (/etc/apt, /var/lib/apt) is never touched. The suite's
# linux-image-amd64 metapackage names the kernel package; what it resolves to
# is recorded in <dir>/version. A kernel already unpacked is reused
# (E2E_KERNELS_REFRESH=1 fetches again).
#
#   5.10  bullseye   6.1  bookworm (+ bookworm-security)   6.12  trixie
set -euo pipefail

kernel=${1:?usage: fetch.sh 5.10|6.1|6.12}
cache=${KERNEL_CACHE:-/var/cache/correlator-e2e-kernels}
# The archive and its security archive come from the machine's own apt
# sources (one-line .list and deb822 .sources), unless given.
apt_uris() { # prints "URI SUITE" for each deb source the machine has
	local f
	for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
		[[ -f $f ]] && awk '$1 == "deb" { i = 2; if ($2 ~ /^\[/) while ($i !~ /\]$/) i++; if ($2 ~ /^\[/) i++; print $i, $(i+1) }' "$f"
	done
	for f in /etc/apt/sources.list.d/*.sources; do
		[[ -f $f ]] && awk 'BEGIN { RS = ""; FS = "\n" } /(^|\n)Types:[^\n]*deb([ \t\n]|$)/ {
			u = ""; su = ""
			for (k = 1; k <= NF; k++) { if ($k ~ /^URIs:/) { split($k, a, /[ \t]+/); u = a[2] } if ($k ~ /^Suites:/) { split($k, b, /[ \t]+/); su = b[2] } }
			if (u != "") print u, su }' "$f"
	done
	return 0
}
mirror=${DEBIAN_MIRROR:-$(apt_uris | awk '$2 !~ /-security$/ { print $1; exit }')}
security=${DEBIAN_SECURITY_MIRROR:-$(apt_uris | awk '$2 ~ /-security$/ { print $1; exit }')}
mirror=${mirror%/} security=${security%/}
keyring=/usr/share/keyrings/debian-archive-keyring.gpg

case $kernel in
5.10) suite=bullseye ;;
6.1) suite=bookworm ;; # 6.1's point releases land in bookworm-security first
6.12) suite=trixie ;;
*) echo "fetch: unknown kernel $kernel (known: 5.10 6.1 6.12)" >&2; exit 2 ;;
esac

dir=$cache/$kernel
if [[ -f $dir/ready && ${E2E_KERNELS_REFRESH:-0} != 1 ]]; then
	echo "$dir"
	exit 0
fi
[[ -n $mirror ]] || { echo "fetch: no Debian archive in the machine's apt sources; set DEBIAN_MIRROR" >&2; exit 1; }
[[ -n $security || $kernel != 6.1 ]] || { echo "fetch: no -security suite in the machine's apt sources; set DEBIAN_SECURITY_MIRROR" >&2; exit 1; }
rm -rf "$dir"
mkdir -p "$dir/apt/lists/partial" "$dir/apt/cache/archives/partial" "$dir/deb"
{
	echo "deb [signed-by=$keyring] $mirror $suite main"
	[[ $kernel != 6.1 ]] || echo "deb [signed-by=$keyring] $security $suite-security main"
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
	-o APT::Architecture=amd64
	-o APT::Architectures=amd64
)
echo "fetch: $kernel: apt-get update ($suite)" >&2
apt-get "${apt_opts[@]}" update -qq >&2
pkg=$(apt-cache "${apt_opts[@]}" depends linux-image-amd64 |
	awk '$1 == "Depends:" && $2 ~ /^linux-image-[0-9]/ { print $2; exit }')
if [[ -z $pkg ]]; then
	echo "fetch: $kernel: linux-image-amd64 in $suite names no kernel package" >&2
	exit 1
fi
echo "fetch: $kernel: apt-get download $pkg" >&2
(cd "$dir/deb" && apt-get "${apt_opts[@]}" download -qq "$pkg" >&2)
deb=$(ls "$dir"/deb/*.deb)
dpkg-deb -x "$deb" "$dir/root"

vmlinuz=$(ls "$dir"/root/boot/vmlinuz-*)
release=${vmlinuz##*/vmlinuz-}
mods=$dir/root/lib/modules/$release
[[ -d $mods ]] || mods=$dir/root/usr/lib/modules/$release
if [[ ! -d $mods ]]; then
	echo "fetch: $kernel: no modules for $release in $deb" >&2
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
