/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Building exec events and maintaining the tgid-keyed lineage map. */
#ifndef CORRELATOR_LINEAGE_H
#define CORRELATOR_LINEAGE_H

#include "maps.h"
#include "task.h"
#include "scan.h"
#include "place.h"
#include "bridge.h"
#include "frame.h"

/* Stops clang from fusing per-slot memsets into one BPF cannot lower. */
#define barrier() asm volatile("" ::: "memory")

#define SIGNAL_GROUP_EXIT 0x00000004
#define USER_HZ_NS 10000000ULL /* /proc reports start time in 1/100 s */
#define MAX_ENV_VARS (1 << 23)  /* bpf_loop's own limit */

static __always_inline bool start_matches(const struct lineage *e, __u64 start)
{
	if (e->lflags & LINEAGE_FLAG_COARSE_START)
		return e->start_ns / USER_HZ_NS == start / USER_HZ_NS;
	return e->start_ns == start;
}

/*
 * put_slot appends an id_wire and the value of s at tail[off] and returns
 * the offset after it. The value is copied whole (16 words, no helper
 * call); bytes past len are overwritten by what follows or lie past the
 * end of the frame, so they are never sent.
 */
static __always_inline __u32 put_slot(__u8 *tail, __u32 off, const struct id_slot *s, __u32 k,
				      __u32 mask)
{
	const __u64 *src = (const __u64 *)s->value;
	__u64 *dst;
	__u32 len = s->len;

	if (len > ID_MAX_LEN)
		len = ID_MAX_LEN;
	off &= mask;
	/* struct id_wire, little-endian: len, source, key, flags. */
	*(__u64 *)(tail + off) = (__u64)len | (__u64)s->source << 16 | (__u64)(k & 0xff) << 24 |
				 (__u64)s->flags << 32;
	dst = (__u64 *)(tail + off + sizeof(struct id_wire));
#pragma unroll
	for (int i = 0; i < ID_MAX_LEN / 8; i++)
		dst[i] = src[i];
	return off + sizeof(struct id_wire) + len;
}

/* emit_exec appends the key slots that were filled and sends the frame. */
static __always_inline void emit_exec(struct exec_buf *b)
{
	struct exec_event *ev = &b->ev;
	__u32 off = ev->filename_len + ev->argv_len + ev->cgroup_len + ev->cgroup_parent_len;

#pragma unroll
	for (__u32 k = 0; k < MAX_KEYS; k++)
		if (ev->ids_mask & (1u << k))
			off = put_slot(b->tail, off, &b->ids[k], k, EXEC_TAIL_MASK);
#pragma unroll
	for (__u32 k = 0; k < MAX_KEYS; k++)
		if (ev->claimed_mask & (1u << k))
			off = put_slot(b->tail, off, &b->claimed[k], k, EXEC_TAIL_MASK);
	off &= EXEC_TAIL_MASK;
	ev->hdr.size = sizeof(*ev) + off;
	emit(ev, sizeof(*ev) + off);
}

/* scan_env returns the keys found in the environment, bit k for key k. */
static __always_inline __u32 scan_env(struct exec_buf *b, struct scan_buf *buf,
				      struct task_struct *p, struct linux_binprm *bprm)
{
	struct exec_event *ev = &b->ev;
	struct mm_struct *mm = p->mm;
	int envc = bprm->envc;
	int argc = bprm->argc;
	struct scan_ctx c = {};

	c.env_start = mm->env_start;
	c.env_end = mm->env_end;
	ev->env_bytes = c.env_end - c.env_start;
	if (!nkeys || envc <= 0 || argc < 0 || c.env_end <= c.env_start)
		return 0;
	c.buf = buf;
	c.eb = b;
	/* The stack starts with argc, argv[argc], NULL, then envp[envc]. */
	c.ptr_base = mm->start_stack + 8 * ((__u64)argc + 2);
	c.n = envc > MAX_ENV_VARS ? MAX_ENV_VARS : envc;
#ifndef CORRELATOR_COMPAT
	bpf_loop((c.n + SCAN_STRIDE - 1) / SCAN_STRIDE, scan_stride, &c, 0);
#else
	scan_all(&c);
#endif
	ev->flags |= c.flags;
	ev->env_scanned = c.visited;
	if (c.flags & EVENT_FLAG_SCAN_TRUNCATED)
		stat_inc(STAT_SCAN_TRUNCATED);
	if (c.flags & EVENT_FLAG_SCAN_ERROR)
		stat_inc(STAT_SCAN_ERRORS);
	return c.found;
}

static __always_inline bool slot_equal(const struct id_slot *a, const struct id_slot *b)
{
	if (a->len != b->len)
		return false;
	for (__u32 j = 0; j < ID_MAX_LEN; j++) {
		if (j >= a->len)
			break;
		if (a->value[j] != b->value[j])
			return false;
	}
	return true;
}

/*
 * resolve_lineage decides each key's authoritative value (ids, ids_mask)
 * and which env claims to report (claimed_mask); found says which
 * claimed[] slots the scan filled.
 */
static __always_inline void resolve_lineage(struct exec_buf *b, __u32 found, __u32 argv,
					    struct task_struct *p)
{
	struct exec_event *ev = &b->ev;
	__u32 zero = 0, tgid = ev->tgid;
	struct lineage *e = bpf_map_lookup_elem(&lineage_map, &tgid);
	struct lineage *ne = 0;
	__u32 root_flags = 0;

	if (e && !start_matches(e, ev->start_ns)) {
		/* The tgid was reused: the old session does not carry over. */
		bpf_map_delete_elem(&lineage_map, &tgid);
		ev->flags |= EVENT_FLAG_STALE_LINEAGE;
		e = 0;
	}
	if (e) {
		ev->root_tgid = e->root_tgid;
		ev->root_start_ns = e->root_start_ns;
		ev->depth = e->depth;
	}
	/* A new root is verified only when exec'd from outside its container. */
	if (!origin_verified(ev->origin))
		root_flags = KEY_FLAG_ROOT_UNVERIFIED;
	if (ev->origin == EXEC_ORIGIN_RUNTIME_CHILD)
		root_flags |= KEY_FLAG_ROOT_INDIRECT;

#pragma unroll
	for (__u32 k = 0; k < MAX_KEYS; k++) {
		struct id_slot *cl = &b->claimed[k];
		struct id_slot *out = &b->ids[k];
		bool in_env = found & (1u << k);

		if (k >= nkeys)
			break;
		if (e && e->ids[k].len) {
			/* The lineage is authoritative; the env is only a claim. */
			__builtin_memcpy(out, &e->ids[k], sizeof(*out));
			ev->ids_mask |= 1u << k;
			out->source = e->ids[k].source == ID_SOURCE_PROCFS ? ID_SOURCE_PROCFS
									    : ID_SOURCE_INHERITED;
			out->flags = e->ids[k].flags & (KEY_FLAG_ROOT_UNVERIFIED | KEY_FLAG_PROCFS_ROOT);
			if (!in_env) {
				out->flags |= KEY_FLAG_ENV_REMOVED;
				continue;
			}
			out->flags |= cl->flags & KEY_FLAG_DUPLICATE_KEY;
			if (!slot_equal(cl, &e->ids[k])) {
				out->flags |= KEY_FLAG_ENV_MISMATCH;
				ev->claimed_mask |= 1u << k;
			}
			continue;
		}
		if (!in_env)
			continue;
		/* A session root: the first ID this lineage has seen for key k. */
		__builtin_memcpy(out, cl, sizeof(*out));
		ev->ids_mask |= 1u << k;
		out->flags |= root_flags;
		/* The bridge's key is the runtime's word only in the argv it
		 * exec'd; in the environment it is the image's or a caller's. */
		if (k == argv_key && !(argv & (1u << k)))
			out->flags |= KEY_FLAG_ROOT_UNVERIFIED;
		if (e) {
			__builtin_memcpy(&e->ids[k], out, sizeof(*out));
			continue;
		}
		if (!ne) {
			ne = bpf_map_lookup_elem(&lineage_scratch, &zero);
			if (!ne)
				continue;
			__builtin_memset(ne, 0, __builtin_offsetof(struct lineage, ids));
#pragma unroll
			for (int j = 0; j < MAX_KEYS; j++) {
				__builtin_memset(&ne->ids[j], 0, sizeof(ne->ids[j]));
				barrier();
			}
			ne->start_ns = ev->start_ns;
			ne->root_start_ns = ev->start_ns;
			ne->root_tgid = tgid;
			ev->root_tgid = tgid;
			ev->root_start_ns = ev->start_ns;
		}
		__builtin_memcpy(&ne->ids[k], out, sizeof(*out));
	}
	if (ne && bpf_map_update_elem(&lineage_map, &tgid, ne, BPF_ANY)) {
		stat_inc(STAT_LINEAGE_FULL);
		ev->flags |= EVENT_FLAG_LINEAGE_FULL;
	}
}

static __always_inline void inherit_lineage(struct task_struct *parent, struct task_struct *child)
{
	__u32 zero = 0, ptgid = BPF_CORE_READ(parent, tgid), ctgid = BPF_CORE_READ(child, tgid);
	struct lineage *e, *ne;

	if (ptgid == ctgid)
		return; /* a new thread shares its group's entry */
	e = bpf_map_lookup_elem(&lineage_map, &ptgid);
	if (!e)
		return;
	if (!start_matches(e, BPF_CORE_READ(parent, group_leader, start_boottime)))
		return;
	ne = bpf_map_lookup_elem(&lineage_scratch, &zero);
	if (!ne)
		return;
	__builtin_memcpy(ne, e, __builtin_offsetof(struct lineage, ids));
#pragma unroll
	for (int k = 0; k < MAX_KEYS; k++) {
		__builtin_memcpy(&ne->ids[k], &e->ids[k], sizeof(ne->ids[k]));
		barrier();
	}
	ne->start_ns = BPF_CORE_READ(child, start_boottime);
	ne->lflags &= ~LINEAGE_FLAG_COARSE_START;
	ne->depth = e->depth + 1;
#pragma unroll
	for (__u32 k = 0; k < MAX_KEYS; k++)
		if (ne->ids[k].source == ID_SOURCE_ENV)
			ne->ids[k].source = ID_SOURCE_INHERITED;
	if (bpf_map_update_elem(&lineage_map, &ctgid, ne, BPF_ANY))
		stat_inc(STAT_LINEAGE_FULL);
}

/*
 * A process nobody was told about: its own thread-group leader, cloned
 * after the probe attached and never exec'd since (so no exec event named
 * it), carrying no lineage entry, in the host's pid namespace. The agent
 * holds a process only from its exec event or a keyed procfs bootstrap
 * (which gives it a lineage entry), so such an exit reaches nobody and is
 * not sent; nor is the exit of an image whose exec was out of scope, or of
 * its forks that never exec'd (PLACE_FLAG_UNSENT, any thread, any pid
 * namespace). Anything else unsure (threads of a group whose leader went
 * first, tasks that predate the probe, containers) still sends its exit.
 */
static __always_inline bool exit_unheard(struct task_struct *p)
{
	struct image_place *pl = place_of(p);

	if (pl && (pl->flags & PLACE_FLAG_UNSENT))
		return true; /* its exec was out of scope (scope.h) */
	if (p->pid != p->tgid || !p->thread_pid || p->thread_pid->level != 0)
		return false;
	return pl && (pl->flags & PLACE_FLAG_NOT_EXECED);
}

static __always_inline void handle_group_exit(struct task_struct *p)
{
	__u32 zero = 0, tgid;
	struct exit_event *ev;
	struct exit_buf *b;
	struct lineage *e;
	unsigned int sflags;
	__u64 start;
	__u32 off;

	if (p->flags & PF_KTHREAD)
		return;
	if (BPF_CORE_READ(p, signal, live.counter) != 0)
		return; /* other threads of the group still run */
	tgid = p->tgid;
	start = BPF_CORE_READ(p, group_leader, start_boottime);
	e = bpf_map_lookup_elem(&lineage_map, &tgid);
	if (e && !start_matches(e, start))
		e = 0;
	if (!e && exit_unheard(p))
		return;
	b = bpf_map_lookup_elem(&exit_scratch, &zero);
	if (!b)
		return;
	ev = &b->ev;
	__builtin_memset(ev, 0, sizeof(*ev));
	ev->hdr.kind = EVENT_KIND_EXIT;
	ev->hdr.time_ns = bpf_ktime_get_boot_ns();
	ev->pid = tgid;
	ev->tgid = tgid;
	ev->ppid = BPF_CORE_READ(p, real_parent, tgid);
	ev->start_ns = start;
	ev->uid = BPF_CORE_READ(p, cred, uid.val);
	{
		/* Exits name their container too, so filters need no exec history. */
		struct cgroup *cg = task_cgroup(p);
		struct kernfs_node *kn = cg ? BPF_CORE_READ(cg, kn) : 0;

		ev->cgroup_id = cgroup_id_of(cg);
		ev->cgroup_len = read_cgroup_name((char *)b->tail, kn);
		off = ev->cgroup_len & (CGROUP_NAME_MAX - 1);
		if (kn)
			ev->cgroup_parent_len = read_cgroup_name((char *)b->tail + off, kn_parent(kn));
		off += ev->cgroup_parent_len;
	}
	ev->exit_code = BPF_CORE_READ(p, exit_code);
	sflags = BPF_CORE_READ(p, signal, flags);
	if (sflags & SIGNAL_GROUP_EXIT)
		ev->exit_code = BPF_CORE_READ(p, signal, group_exit_code);
	if (e) {
#pragma unroll
		for (__u32 k = 0; k < MAX_KEYS; k++) {
			if (e->ids[k].source == ID_SOURCE_NONE && !e->ids[k].flags)
				continue;
			off = put_slot(b->tail, off, &e->ids[k], k, EXIT_TAIL_MASK);
			ev->ids_mask |= 1u << k;
		}
		bpf_map_delete_elem(&lineage_map, &tgid);
	}
	off &= EXIT_TAIL_MASK;
	ev->hdr.size = sizeof(*ev) + off;
	emit(ev, sizeof(*ev) + off);
}

#endif /* CORRELATOR_LINEAGE_H */
