/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Image provenance: where each task's current image was loaded (cgroup,
 * pid namespace and its owning user namespace), kept in task storage and
 * copied at every clone. At exec it answers who set the environment: a
 * container runtime's exec helper is loaded outside the container and
 * execs the user's command inside it, while any process of the container,
 * whatever its parent, runs an image loaded inside.
 */
#ifndef CORRELATOR_PLACE_H
#define CORRELATOR_PLACE_H

#include "maps.h"
#include "task.h"

/*
 * At clone the child runs its creator's image. sched_process_fork passes
 * the creator (current), not the new parent, so clone(CLONE_PARENT) cannot
 * borrow the parent's provenance. Only the runtime's own exec is the first
 * image: a fork of it is the container's code.
 */
static __always_inline void inherit_place(struct task_struct *creator, struct task_struct *child)
{
	struct image_place *src, *dst;

	src = bpf_task_storage_get(&image_places, creator, 0, 0);
	if (!src)
		return; /* the creator predates the probe: the child stays unknown */
	dst = bpf_task_storage_get(&image_places, child, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!dst) {
		stat_inc(STAT_PLACE_ERRORS);
		return;
	}
	dst->cgroup_id = src->cgroup_id;
	dst->pidns = src->pidns;
	dst->userns = src->userns;
	dst->flags = (src->flags & ~PLACE_FLAG_RUNTIME_EXEC) | PLACE_FLAG_NOT_EXECED;
}

/*
 * exec_origin judges the image that called execve (by) against where the
 * new image runs. An unprivileged process can leave neither its cgroup nor
 * its pid namespace, and can make a nested pid namespace only under a new
 * user namespace; so "loaded outside" is another cgroup, or an outer pid
 * namespace of the same user namespace (runc >= 1.4 clones its helper into
 * the container's cgroup with CLONE_INTO_CGROUP before it joins the pid
 * namespace).
 */
static __always_inline __u32 exec_origin(const struct exec_event *ev, struct task_struct *p,
					 const struct image_place *by, __u32 nr)
{
	if (!by->pidns)
		return EXEC_ORIGIN_UNKNOWN;
	if (by->cgroup_id == ev->cgroup_id) {
		if (by->pidns == ev->pidns)
			return (by->flags & PLACE_FLAG_RUNTIME_EXEC) ? EXEC_ORIGIN_RUNTIME_CHILD
								      : EXEC_ORIGIN_INSIDE;
		if (by->userns != ev->userns)
			return EXEC_ORIGIN_NESTED_USERNS;
	}
	/* Loaded outside; a parent inside the container still chose the env. */
	if (cgroup_id_of(task_cgroup(p->real_parent)) == ev->cgroup_id)
		return EXEC_ORIGIN_PARENT_INSIDE;
	/* An exec joins a running container; only its start execs a pid 1. */
	if (nr == 1 && ev->pidns != by->pidns)
		return EXEC_ORIGIN_CONTAINER_INIT;
	return by->cgroup_id != ev->cgroup_id ? EXEC_ORIGIN_OTHER_CGROUP : EXEC_ORIGIN_OUTER_PIDNS;
}

static __always_inline bool origin_verified(__u32 origin)
{
	return origin == EXEC_ORIGIN_OTHER_CGROUP || origin == EXEC_ORIGIN_OUTER_PIDNS;
}

/* judge_exec records who exec'd this image, then makes its place the task's. */
static __always_inline void judge_exec(struct exec_event *ev, struct task_struct *p, __u32 nr)
{
	struct image_place *pl;

	pl = bpf_task_storage_get(&image_places, p, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!pl) {
		stat_inc(STAT_PLACE_ERRORS);
		ev->origin = EXEC_ORIGIN_UNKNOWN;
		return;
	}
	__builtin_memcpy(&ev->exec_by, pl, sizeof(*pl));
	ev->origin = exec_origin(ev, p, pl, nr);
	pl->cgroup_id = ev->cgroup_id;
	pl->pidns = ev->pidns;
	pl->userns = ev->userns;
	pl->flags = origin_verified(ev->origin) ? PLACE_FLAG_RUNTIME_EXEC : 0;
}

#endif /* CORRELATOR_PLACE_H */
