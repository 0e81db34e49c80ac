#!/bin/bash
# guest.sh: PID 1 of a kernel-matrix guest after switch_root (run.sh copies
# it into the results share). Mounts what a node has (cgroup v2 unified,
# bpffs, tracefs), runs tests.sh, and powers the guest off.
set -u
R=/run/e2e
# shellcheck source=/dev/null
. "$R/env"

off() {
	sync
	echo o >/proc/sysrq-trigger
	sleep 60
}
trap off EXIT

mount -t proc proc /proc
mount -t sysfs sysfs /sys
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm
mount -t cgroup2 cgroup2 /sys/fs/cgroup
mount -t bpf bpf /sys/fs/bpf
mount -t tracefs tracefs /sys/kernel/tracing
mount -t debugfs debugfs /sys/kernel/debug 2>/dev/null || true
# The kernel's own modules, for anything a test loads on demand.
mkdir -p "/lib/modules/$(uname -r)"
mount --bind "$E2E_MODULES" "/lib/modules/$(uname -r)"
busybox ip link set lo up
hostname "e2e-${E2E_KERNEL//[^a-z0-9.]/-}"
# RLIMIT_MEMLOCK as the kernel's distribution leaves it for root's processes
# (E2E_MEMLOCK, KiB; empty: as the kernel set it for PID 1). On 5.10 BPF
# maps and programs are charged to it (memcg accounting came in 5.11), and
# Debian 11's default, the kernel's 64 KiB (its systemd 247 does not raise
# it), is what a loader that forgets to lift it fails on.
[[ -z ${E2E_MEMLOCK:-} ]] || ulimit -l "$E2E_MEMLOCK"
ln -sf /proc/self/fd /dev/fd 2>/dev/null || true

export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/usr/local/go/bin
export HOME=/root TMPDIR=/tmp
read -r up _ </proc/uptime
echo "e2e-guest: $(uname -r) $(uname -m), up ${up}s, cgroup: $(cat /sys/fs/cgroup/cgroup.controllers), memlock: $(ulimit -l) KiB"
echo "${up%.*}" >"$R/boot.seconds"
bash "$E2E_SCRIPTS/tests.sh" "$R"
echo "e2e-guest: tests.sh exited $?"
