/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The few kernel types correlator reads, declared with preserve_access_index
 * so that libbpf/cilium CO-RE relocates every field against the running
 * kernel's BTF. Only the fields used are declared; order and size do not
 * matter. This replaces a 3 MB generated vmlinux.h tied to one kernel.
 */
#ifndef CORRELATOR_VMLINUX_MIN_H
#define CORRELATOR_VMLINUX_MIN_H

typedef unsigned char __u8;
typedef signed char __s8;
typedef unsigned short __u16;
typedef short __s16;
typedef unsigned int __u32;
typedef int __s32;
typedef unsigned long long __u64;
typedef long long __s64;
typedef __u16 __be16;
typedef __u32 __be32;
typedef __u32 __wsum;
typedef _Bool bool;
#define true 1
#define false 0

enum bpf_map_type {
	BPF_MAP_TYPE_HASH = 1,
	BPF_MAP_TYPE_ARRAY = 2,
	BPF_MAP_TYPE_PERCPU_ARRAY = 6,
	BPF_MAP_TYPE_RINGBUF = 27,
	BPF_MAP_TYPE_TASK_STORAGE = 29,
};

enum {
	BPF_F_NO_PREALLOC = 1,
};

enum {
	BPF_LOCAL_STORAGE_GET_F_CREATE = 1,
};

enum {
	BPF_RB_NO_WAKEUP = 1,
	BPF_RB_FORCE_WAKEUP = 2,
};

enum {
	BPF_RB_AVAIL_DATA = 0,
};

enum {
	BPF_ANY = 0,
	BPF_NOEXIST = 1,
	BPF_EXIST = 2,
};

#pragma clang diagnostic push
#pragma clang diagnostic ignored "-Wpadded" /* kernel layouts, not ours */
#pragma clang attribute push(__attribute__((preserve_access_index)), apply_to = record)

typedef struct {
	int counter;
} atomic_t;

struct ns_common {
	unsigned int inum;
};

struct user_namespace {
	struct ns_common ns;
};

struct pid_namespace {
	struct ns_common ns;
	struct user_namespace *user_ns;
};

struct upid {
	int nr;
	struct pid_namespace *ns;
};

struct pid {
	unsigned int level;
	struct upid numbers[1];
};

struct kernfs_node {
	const char *name;
	__u64 id;
};

/* Before 6.15 the parent pointer was called "parent". */
struct kernfs_node___old {
	struct kernfs_node *parent;
};

/* Since 6.15 it is RCU-protected and called "__parent". */
struct kernfs_node___new {
	struct kernfs_node *__parent;
};

struct cgroup {
	struct kernfs_node *kn;
	int level;
};

struct cgroup_subsys_state {
	struct cgroup *cgroup;
};

struct css_set {
	struct cgroup_subsys_state *subsys[1];
	struct cgroup *dfl_cgrp;
};

enum cgroup_subsys_id {
	memory_cgrp_id = 4,
};

struct signal_struct {
	atomic_t live;
	int group_exit_code;
	unsigned int flags;
};

struct mm_struct {
	unsigned long start_stack;
	unsigned long arg_start;
	unsigned long arg_end;
	unsigned long env_start;
	unsigned long env_end;
};

typedef struct {
	unsigned int val;
} kuid_t;

struct cred {
	kuid_t uid;
};

struct task_struct {
	unsigned int flags;
	int pid;
	int tgid;
	int exit_code;
	__u64 start_boottime;
	struct task_struct *real_parent;
	struct task_struct *group_leader;
	struct mm_struct *mm;
	const struct cred *cred;
	struct css_set *cgroups;
	struct pid *thread_pid;
	struct signal_struct *signal;
};

struct linux_binprm {
	unsigned long p;
	int argc;
	int envc;
	const char *filename;
};

#pragma clang attribute pop
#pragma clang diagnostic pop

#endif /* CORRELATOR_VMLINUX_MIN_H */
