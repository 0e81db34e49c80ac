/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Capture scope: which execs are sent. By default only those a join can use:
 * an exec in a pod's cgroup, or one that carries lineage (an inherited
 * session, or a configured key in its own environment). A host process
 * outside every pod with no key is counted and skipped before its argv is
 * read: its command line is of no use to the join and a privacy cost.
 *
 * "A pod's cgroup" is decided here, at exec, from the cgroup that names the
 * container (task_cgroup: the unified one on v2, the v1 memory one on a
 * hybrid host) and its ancestors' names: every kubelet cgroup driver puts
 * pods under a "kubepods" node (cgroupfs: /kubepods/<qos>/pod<uid>/<id>;
 * systemd: kubepods.slice/kubepods-<qos>.slice/.../cri-containerd-<id>.scope),
 * possibly below a --cgroup-root or a node container's own cgroup. A map of
 * pod cgroups filled by userspace would miss the first exec of a new pod:
 * the runtime creates the cgroup and execs into it before any agent could
 * learn of it.
 */
#ifndef CORRELATOR_SCOPE_H
#define CORRELATOR_SCOPE_H

#include "maps.h"
#include "task.h"
#include "place.h"

#define POD_CGROUP_DEPTH 16 /* ancestors walked; kubepods sits within the first few */
#define KUBEPODS 0x73646f706562756bULL /* "kubepods", little-endian */

/* Set before load: non-zero sends every exec (--capture-scope=all). */
const volatile __u32 scope_all = 0;

/*
 * pod_cgroup reports whether the kernfs node at kn_addr, or an ancestor, is
 * a kubelet's pods node: named kubepods* (cgroupfs, and systemd at the root),
 * or <root>-kubepods.slice (systemd below a --cgroup-root, as kind runs:
 * kubelet.slice/kubelet-kubepods.slice/...). The suffix is matched only on
 * names shorter than POD_NAME_MAX; a cgroup root that long is not seen.
 * A global function, verified once on its own: inlined, each way out of the
 * walk would carry its own verifier state through the rest of the exec
 * handler. So kn comes as a plain address, read through probe reads.
 */
#define POD_NAME_MAX 48
#define KUBEPODS_SLICE_HI 0x646f706562756b2dULL /* "-kubepod" */
#define KUBEPODS_SLICE_LO 0x006563696c732e73ULL /* "s.slice\0" */

__noinline int pod_cgroup(__u64 kn_addr)
{
	struct kernfs_node *kn = (void *)kn_addr;

	for (int i = 0; i < POD_CGROUP_DEPTH && kn; i++) {
		char name[POD_NAME_MAX] = {};
		__u64 tail[2] = {};
		const char *p = 0;
		long n;

		bpf_core_read(&p, sizeof(p), &kn->name);
		n = bpf_probe_read_kernel_str(name, sizeof(name), p);
		if (n >= 9 && *(__u64 *)name == KUBEPODS)
			return 1;
		/* n counts the NUL: the name's last 16 bytes with it are the suffix */
		if (n >= (long)sizeof(tail) && n < (long)sizeof(name) &&
		    !bpf_probe_read_kernel(tail, sizeof(tail), p + n - sizeof(tail)) &&
		    tail[0] == KUBEPODS_SLICE_HI && tail[1] == KUBEPODS_SLICE_LO)
			return 1;
		kn = kn_parent(kn);
	}
	return 0;
}

/*
 * in_scope decides an exec whose environment carries no key: sent when the
 * scope is all, when the scan could not finish, when it inherited lineage,
 * or when it runs in a pod (kn: its container cgroup's kernfs node).
 */
static __always_inline bool in_scope(const struct exec_event *ev, __u64 kn, __u32 tgid)
{
	if (scope_all)
		return true;
	if (ev->flags & (EVENT_FLAG_SCAN_TRUNCATED | EVENT_FLAG_SCAN_ERROR))
		return true; /* a scan that did not finish proves no key absent */
	if (bpf_map_lookup_elem(&lineage_map, &tgid))
		return true; /* an inherited session, even a stale one: resolve decides */
	return pod_cgroup(kn);
}

/*
 * skip_exec counts an exec left out of scope and marks its image unsent,
 * so its exit (and its forks' that never exec) is not sent either.
 */
static __always_inline void skip_exec(struct task_struct *p)
{
	struct image_place *pl = place_of(p);

	if (pl)
		pl->flags |= PLACE_FLAG_UNSENT;
	stat_inc(STAT_EXECS_SKIPPED);
}

#endif /* CORRELATOR_SCOPE_H */
