#!/usr/bin/env bash
# userland.sh ARCH: a root filesystem of Debian's own ARCH packages for the
# matrix's guests of that architecture (arm64: the host's amd64 root, which
# the amd64 guests share over 9p, cannot run there). Prints its directory,
# <cache>/ARCH-userland/root.
#
# The packages are the host's suite's (bookworm on Debian 12), as the amd64
# guests run the host's own: bash and coreutils for the scripts,
# busybox-static for the initramfs and the containers' rootfs, runc and crun,
# kmod, and what they depend on. They are fetched with apt-get install
# --download-only into a private apt state (an empty dpkg status, its own
# sources list from the machine's mirror, APT::Architecture=ARCH: the
# machine's apt setup is untouched) and unpacked with dpkg-deb -x; no
# maintainer script runs, so the few files those would write (passwd, group,
# /bin/sh) are written here. A root already built the same way is reused
# (E2E_KERNELS_REFRESH=1 builds it again).
set -euo pipefail

arch=${1:?usage: userland.sh arm64}
cache=${KERNEL_CACHE:-/var/cache/correlator-e2e-kernels}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# What the guests run: tests.sh and guest.sh (bash, coreutils, grep, sed,
# hostname, mount, util-linux), the test binaries' helpers (/bin/sh,
# /bin/true, env), the runtimes, and modprobe for modules a test loads on
# demand.
readonly PACKAGES=(bash dash coreutils grep sed mawk findutils hostname util-linux mount procps kmod busybox-static runc crun)

dir=$cache/$arch-userland
# ready names the layout and the packages asked for: a root built otherwise
# is built again.
stamp="merged-usr ${PACKAGES[*]}"
if [[ -f $dir/ready && $(cat "$dir/ready") == "$stamp" && ${E2E_KERNELS_REFRESH:-0} != 1 ]]; then
	echo "$dir/root"
	exit 0
fi
# shellcheck source=scripts/e2e-kernels/mirror.sh
. "$here/mirror.sh"
[[ -n $mirror ]] || { echo "userland: no Debian archive in the machine's apt sources; set DEBIAN_MIRROR" >&2; exit 1; }
# shellcheck source=/dev/null
suite=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
suite=${E2E_KERNELS_USERLAND_SUITE:-${suite:-bookworm}}
rm -rf "$dir"
mkdir -p "$dir/apt/lists/partial" "$dir/apt/cache" "$dir/deb/partial" "$dir/root"
: >"$dir/apt/status"
{
	echo "deb [arch=$arch signed-by=$keyring] $mirror $suite main"
	[[ -z $security ]] || echo "deb [arch=$arch signed-by=$keyring] $security $suite-security main"
} >"$dir/apt/sources.list"
apt_opts=(
	-o "Dir::Etc::SourceList=$dir/apt/sources.list"
	-o Dir::Etc::SourceParts=/dev/null
	-o Dir::Etc::Preferences=/dev/null
	-o Dir::Etc::PreferencesParts=/dev/null
	-o "Dir::State::Lists=$dir/apt/lists"
	-o "Dir::State::Status=$dir/apt/status"
	-o "Dir::Cache=$dir/apt/cache"
	-o "Dir::Cache::Archives=$dir/deb"
	-o Debug::NoLocking=1
	-o APT::Sandbox::User=root
	-o "APT::Architecture=$arch"
	-o "APT::Architectures=$arch"
)
echo "userland: $arch: apt-get update ($suite)" >&2
apt-get "${apt_opts[@]}" update -qq >&2
# apt resolves what they depend on as for an install on an empty system
# (its own empty dpkg status), and downloads it.
echo "userland: $arch: apt-get install --download-only ${PACKAGES[*]}" >&2
apt-get "${apt_opts[@]}" install --download-only --no-install-recommends -y -qq "${PACKAGES[@]}" >&2
for deb in "$dir"/deb/*.deb; do
	dpkg-deb -x "$deb" "$dir/root"
	printf '%s %s\n' "$(dpkg-deb -f "$deb" Package)" "$(dpkg-deb -f "$deb" Version)" >>"$dir/packages"
done

r=$dir/root
# Merged /usr, as every Debian 12 system is (and the host the amd64 guests
# share): /bin, /sbin and /lib are links into /usr, so /usr/bin/ls exists
# (TestKernelTampering execs it by PATH=/usr/bin:/bin). The packages still
# ship both trees; what they put in /bin goes to /usr/bin.
for d in bin sbin lib; do
	mkdir -p "$r/usr/$d"
	if [[ -d $r/$d && ! -L $r/$d ]]; then
		tar -C "$r/$d" -cf - . | tar -C "$r/usr/$d" -xf -
		rm -rf "${r:?}/$d"
	fi
	ln -sfn "usr/$d" "$r/$d"
done
mkdir -p "$r"/{proc,sys,dev,run,tmp,root,var/tmp,lib/modules,etc}
chmod 1777 "$r/tmp" "$r/var/tmp"
chmod 0700 "$r/root"
# What dash's and base-files' maintainer scripts would write.
[[ -e $r/bin/sh ]] || ln -s dash "$r/bin/sh"
printf 'root:x:0:0:root:/root:/bin/bash\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n' >"$r/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' >"$r/etc/group"
: >"$r/etc/fstab"
ln -sfn /proc/self/mounts "$r/etc/mtab"
# No ld.so.cache (no ldconfig of this architecture runs here): Debian's
# loader searches the multiarch directories without one.
for b in bash sh busybox runc crun; do
	[[ -e $r/bin/$b || -e $r/usr/bin/$b || -e $r/usr/sbin/$b || -e $r/sbin/$b ]] ||
		{ echo "userland: $arch: no $b in the unpacked packages" >&2; exit 1; }
done
rm -rf "$dir/deb" "$dir/apt/cache"
echo "$stamp" >"$dir/ready"
echo "$r"
