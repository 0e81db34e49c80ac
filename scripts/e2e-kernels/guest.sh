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
hostname "e2e-$E2E_KERNEL"
ln -sf /proc/self/fd /dev/fd 2>/dev/null || true

export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/usr/local/go/bin
export HOME=/root TMPDIR=/tmp
echo "e2e-guest: $(uname -r), cgroup: $(cat /sys/fs/cgroup/cgroup.controllers)"
bash "$E2E_SCRIPTS/tests.sh" "$R"
echo "e2e-guest: tests.sh exited $?"
