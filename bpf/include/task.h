/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Reading identity facts off a task_struct, portably through CO-RE.
 * tp_btf hands us BTF-typed pointers, so fields are read with direct loads
 * (the verifier turns them into fault-safe PROBE_MEM loads) rather than a
 * bpf_probe_read_kernel call each: these reads run on every exec.
 */
#ifndef CORRELATOR_TASK_H
#define CORRELATOR_TASK_H

#include "vmlinux_min.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

#define PF_KTHREAD 0x00200000

/* The pid namespace the task lives in (task_active_pid_ns), read once. */
static __always_inline struct upid task_upid(struct task_struct *t)
{
	struct pid *pid = t->thread_pid;
	unsigned int level;
	struct upid up = {};

	if (!pid)
		return up;
	level = pid->level;
	if (level > 32)
		return up;
	bpf_core_read(&up, sizeof(up), &pid->numbers[level]);
	return up;
}

static __always_inline __u32 task_pidns(struct task_struct *t)
{
	struct upid up = task_upid(t);

	if (!up.ns)
		return 0;
	return BPF_CORE_READ(up.ns, ns.inum);
}

/*
 * The task's pid namespace, the user namespace that owns it, and the
 * task's pid in it: an unprivileged process can only make a new pid
 * namespace under a new user namespace, which is what the owner shows.
 */
static __always_inline void task_ns_view(struct task_struct *t, __u32 *pidns, __u32 *userns,
					 __u32 *nr)
{
	struct upid up = task_upid(t);

	*pidns = 0;
	*userns = 0;
	*nr = up.nr;
	if (!up.ns)
		return;
	*pidns = BPF_CORE_READ(up.ns, ns.inum);
	*userns = BPF_CORE_READ(up.ns, user_ns, ns.inum);
}

/*
 * The cgroup that names the container: the unified (v2) cgroup when the task
 * is placed in one, else the v1 memory controller's (hybrid or v1 hosts).
 */
static __always_inline struct cgroup *task_cgroup(struct task_struct *t)
{
	struct css_set *cs = t->cgroups;
	struct cgroup *cg;

	if (!cs)
		return 0;
	cg = cs->dfl_cgrp;
	if (cg && cg->level > 0)
		return cg;
	if (bpf_core_enum_value_exists(enum cgroup_subsys_id, memory_cgrp_id)) {
		int id = bpf_core_enum_value(enum cgroup_subsys_id, memory_cgrp_id);
		struct cgroup_subsys_state *css = 0;

		if (id >= 0 && id < 16)
			bpf_core_read(&css, sizeof(css), &cs->subsys[id]);
		if (css)
			return BPF_CORE_READ(css, cgroup);
	}
	return cg;
}

static __always_inline struct kernfs_node *kn_parent(struct kernfs_node *kn)
{
	struct kernfs_node___new *n = (void *)kn;
	struct kernfs_node___old *o = (void *)kn;

	if (bpf_core_field_exists(n->__parent))
		return BPF_CORE_READ(n, __parent);
	return BPF_CORE_READ(o, parent);
}

static __always_inline __u64 cgroup_id_of(struct cgroup *cg)
{
	/* cg may come from a probe read (the v1 path): read through helpers. */
	if (!cg)
		return 0;
	return BPF_CORE_READ(cg, kn, id);
}

#endif /* CORRELATOR_TASK_H */
