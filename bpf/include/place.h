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

#ifndef CORRELATOR_COMPAT
/* place_of returns t's image place, or 0 when none was recorded. */
static __always_inline struct image_place *place_of(struct task_struct *t)
{
	return bpf_task_storage_get(&image_places, t, 0, 0);
}

/* place_new returns t's image place, created zeroed when it had none. */
static __always_inline struct image_place *place_new(struct task_struct *t)
{
	return bpf_task_storage_get(&image_places, t, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
}

/* Task storage is freed with its task. */
static __always_inline void place_clear(struct task_struct *t) {}
#else
/* The compat object's places: a hash keyed by the task's address (maps.h). */
static __always_inline struct image_place *place_of(struct task_struct *t)
{
	__u64 key = (__u64)t;

	return bpf_map_lookup_elem(&image_places, &key);
}

static __always_inline struct image_place *place_new(struct task_struct *t)
{
	struct image_place zero = {};
	__u64 key = (__u64)t;
	struct image_place *pl = bpf_map_lookup_elem(&image_places, &key);

	if (pl)
		return pl;
	/* A full map fails the update: the caller counts it. */
	bpf_map_update_elem(&image_places, &key, &zero, BPF_NOEXIST);
	return bpf_map_lookup_elem(&image_places, &key);
}

/* Every exiting thread's place is freed, and a clone starts clean. */
static __always_inline void place_clear(struct task_struct *t)
{
	__u64 key = (__u64)t;

	bpf_map_delete_elem(&image_places, &key);
}
#endif

/*
 * At clone the child runs its creator's image. sched_process_fork passes
 * the creator (current), not the new parent, so clone(CLONE_PARENT) cannot
 * borrow the parent's provenance. Only the runtime's own exec is the first
 * image: a fork of it is the container's code.
 */
static __always_inline void inherit_place(struct task_struct *creator, struct task_struct *child)
{
	struct image_place *src, *dst;

	src = place_of(creator);
	if (!src) {
		place_clear(child);
		return; /* the creator predates the probe: the child stays unknown */
	}
	dst = place_new(child);
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

	pl = place_new(p);
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
