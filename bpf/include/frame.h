/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Filling an exec frame: the fixed part, then the tail's strings. */
#ifndef CORRELATOR_FRAME_H
#define CORRELATOR_FRAME_H

#include "maps.h"
#include "task.h"

static __always_inline __u16 read_cgroup_name(char *dst, struct kernfs_node *kn)
{
	const char *name;
	long n;

	if (!kn)
		return 0;
	name = BPF_CORE_READ(kn, name);
	n = bpf_probe_read_kernel_str(dst, CGROUP_NAME_MAX, name);
	return n > 0 ? n - 1 : 0;
}

/*
 * fill_exec writes the fixed part of the frame and returns the task's pid
 * in its own pid namespace. The container cgroup's kernfs node is kept in
 * b->kn as a plain address: the ways task_cgroup finds it stay here
 * instead of each walking the rest of the handler through the verifier.
 */
static __always_inline __u32 fill_exec(struct exec_buf *b, struct task_struct *p)
{
	struct exec_event *ev = &b->ev;
	struct task_struct *parent = p->real_parent;
	struct cgroup *cg = task_cgroup(p);
	__u32 nr;

	__builtin_memset(ev, 0, sizeof(*ev));
	ev->hdr.kind = EVENT_KIND_EXEC;
	ev->hdr.time_ns = bpf_ktime_get_boot_ns();
	ev->pid = p->pid;
	ev->tgid = p->tgid;
	ev->start_ns = p->start_boottime;
	ev->ppid = parent->tgid;
	ev->parent_start_ns = parent->group_leader->start_boottime;
	ev->uid = p->cred->uid.val;
	task_ns_view(p, &ev->pidns, &ev->userns, &nr);
	ev->cgroup_id = cgroup_id_of(cg);
	b->kn = (__u64)(cg ? BPF_CORE_READ(cg, kn) : 0);
	return nr;
}

/*
 * fill_strings writes the tail's strings (filename, argv, cgroup names),
 * only for an exec that is sent: argv is read for nothing else. A global
 * function, verified once on its own, since it runs after the environment
 * scan, whose many ways out would each carry it through the verifier
 * again; so it takes plain numbers (argv's bounds, the filename's and the
 * kernfs node's addresses, read through probe reads). Returns 0, or -1
 * without a buffer.
 */
#ifndef CORRELATOR_COMPAT
__noinline int fill_strings(struct exec_buf *b, __u64 filename, __u64 astart, __u64 aend,
			    __u64 kn_addr)
{
#else
/* 5.10 passes a global function scalars only: the buffer is looked up here. */
__noinline int fill_strings(__u64 filename, __u64 astart, __u64 aend, __u64 kn_addr)
{
	__u32 zero = 0;
	struct exec_buf *b = bpf_map_lookup_elem(&exec_scratch, &zero);
#endif
	struct kernfs_node *kn = (void *)kn_addr;
	struct exec_event *ev;
	__u64 alen;
	__u32 off;
	long n;

	if (!b)
		return -1;
	ev = &b->ev;
	n = bpf_probe_read_kernel_str(b->tail, FILENAME_MAX_LEN, (void *)filename);
	ev->filename_len = n > 0 ? n - 1 : 0;
	off = ev->filename_len & (FILENAME_MAX_LEN - 1);

	alen = aend > astart ? aend - astart : 0;
	if (alen > ARGV_MAX) {
		alen = ARGV_MAX;
		ev->flags |= EVENT_FLAG_ARGV_TRUNCATED;
	}
	if (alen && !bpf_probe_read_user(b->tail + off, alen, (void *)astart))
		ev->argv_len = alen;
	off = (off + ev->argv_len) & 2047; /* at most 255 + 1024 */
	ev->cgroup_len = read_cgroup_name((char *)b->tail + off, kn);
	off = (off + ev->cgroup_len) & 2047; /* plus 127 */
	if (kn)
		ev->cgroup_parent_len = read_cgroup_name((char *)b->tail + off, kn_parent(kn));
	return 0;
}

#endif /* CORRELATOR_FRAME_H */
