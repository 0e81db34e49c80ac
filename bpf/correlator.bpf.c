// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * correlator: capture KUBERNETES_EXEC_AUDIT_ID (and other configured keys)
 * at exec, and carry it to every descendant at fork, in kernel maps that
 * userspace inside the session cannot touch.
 */
#include "include/vmlinux_min.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "include/correlator.h"
#include "include/maps.h"
#include "include/task.h"
#include "include/scan.h"
#include "include/lineage.h"
#include "include/scope.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* Keep the shared types in BTF so bpf2go -type can generate them. */
const struct exec_event *unused_exec_event __attribute__((unused));
const struct exit_event *unused_exit_event __attribute__((unused));
const struct lineage *unused_lineage __attribute__((unused));
const enum event_kind *unused_event_kind __attribute__((unused));
const enum key_flag *unused_key_flag __attribute__((unused));
const enum event_flag *unused_event_flag __attribute__((unused));
const enum id_source *unused_id_source __attribute__((unused));
const enum stat_index *unused_stat_index __attribute__((unused));
const enum lineage_flag *unused_lineage_flag __attribute__((unused));
const enum exec_origin *unused_exec_origin __attribute__((unused));
const struct image_place *unused_image_place __attribute__((unused));
const struct id_wire *unused_id_wire __attribute__((unused));
const enum event_limit *unused_event_limit __attribute__((unused));

/*
 * sched_process_exec fires in exec_binprm() after the binary handler has
 * committed the new mm (env_start..env_end, the envp table) and before the
 * new image runs its first instruction; other threads are already gone
 * (de_thread), so the environment read here is exactly what the process
 * starts with. The frame carries only the bytes used (see struct
 * exec_event). An exec out of scope (scope.h) is judged, scanned for a
 * key and dropped before its argv is read. tp_btf since 5.5.
 */
SEC("tp_btf/sched_process_exec")
int BPF_PROG(handle_exec, struct task_struct *p, int old_pid, struct linux_binprm *bprm)
{
	__u32 zero = 0;
	struct exec_buf *b = bpf_map_lookup_elem(&exec_scratch, &zero);
	struct scan_buf *buf = bpf_map_lookup_elem(&scan_scratch, &zero);
	__u32 nr, found, argv;

	if (!b || !buf)
		return 0;
	nr = fill_exec(b, p);
	judge_exec(&b->ev, p, nr);
	b->found = scan_env(b, buf, p, bprm);
	if (!b->found && !in_scope(&b->ev, b->kn, b->ev.tgid)) {
		skip_exec(p);
		return 0;
	}
	/* Reloaded, so the verifier walks on with one state, not one per branch. */
	found = b->found;
#ifndef CORRELATOR_COMPAT
	fill_strings(b, (__u64)BPF_CORE_READ(bprm, filename), p->mm->arg_start, p->mm->arg_end, b->kn);
#else
	fill_strings((__u64)BPF_CORE_READ(bprm, filename), p->mm->arg_start, p->mm->arg_end, b->kn);
#endif
	argv = argv_claim(b);
	resolve_lineage(b, found | argv, argv, p);
	emit_exec(b);
	return 0;
}

/*
 * sched_process_fork fires in kernel_clone() after copy_process() and before
 * wake_up_new_task(): the child inherits its parent's entry before it can
 * run a single instruction. Threads share their group's entry (keyed by
 * tgid), so a fork from any thread finds it; every clone, threads too,
 * copies its creator's image place (a thread may exec). tp_btf since 5.5.
 */
SEC("tp_btf/sched_process_fork")
int BPF_PROG(handle_fork, struct task_struct *parent, struct task_struct *child)
{
	inherit_place(parent, child);
	inherit_lineage(parent, child);
	return 0;
}

/*
 * sched_process_exit fires in do_exit() for every thread; the group is dead
 * when signal->live reached zero, and only then is the entry dropped, so a
 * leader that exits before its threads does not orphan them. A process no
 * exec event named and no session holds sends no exit (exit_unheard).
 * Every thread's image place is freed here in the compat object (task
 * storage frees itself). tp_btf since 5.5.
 */
SEC("tp_btf/sched_process_exit")
int BPF_PROG(handle_exit, struct task_struct *p)
{
	handle_group_exit(p);
	place_clear(p);
	return 0;
}

/*
 * Built once per architecture: pkg/capture/gen.go runs bpf2go with -target
 * amd64,arm64, which defines __TARGET_ARCH_x86 or __TARGET_ARCH_arm64 (and
 * picks the object by GOARCH at build time). Nothing above reads pt_regs,
 * syscall numbers or an arch-only field, so both objects come out the same
 * (docs/kernels.md, "Architectures"); exactly one target arch keeps
 * bpf_tracing.h's PT_REGS_* right should a kprobe ever be added. At the end
 * of the file so that the programs' line info does not move.
 */
#if defined(__TARGET_ARCH_x86) + defined(__TARGET_ARCH_arm64) != 1
#error "build with exactly one of __TARGET_ARCH_x86, __TARGET_ARCH_arm64 (bpf2go -target amd64,arm64)"
#endif
