/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
#ifndef CORRELATOR_MAPS_H
#define CORRELATOR_MAPS_H

#include "correlator.h"

#define PTR_BLOCK 256          /* envp pointers read per probe */
#define WIN_SIZE 16384         /* env bytes buffered per probe */
#define WIN_PAD 256            /* tail kept so a key at the window's edge reads whole */
#define WIN_LIMIT (WIN_SIZE - WIN_PAD)
#define SCAN_STRIDE 4          /* envp pointers per bpf_loop callback (8 verifies 4x slower for ~5% less) */

/*
 * Session lineage, keyed by tgid. Pinned by name so a restarted agent keeps
 * every live session. A plain hash, not LRU: silently evicting a live
 * session would lose attribution, so a full map is counted instead.
 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, struct lineage);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} lineage_map SEC(".maps");

#ifndef CORRELATOR_COMPAT
/*
 * Each task's image place. Task storage lives and dies with the task, so
 * it needs no capacity and no exit cleanup; pinned, it survives a restart.
 */
struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct image_place);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} image_places SEC(".maps");
#else
/*
 * The compat object's image places (kernels without task storage for
 * tracing programs, < 5.11): a hash keyed by the task_struct's address,
 * which, unlike pid and start time, survives a non-leader thread's exec
 * (de_thread gives it the leader's pid and start time). Every thread's exit
 * frees its entry, and a clone overwrites or clears the child's, so a freed
 * task_struct's address reused by a new task never reads an old place. A
 * full map is counted (STAT_PLACE_ERRORS); that task's roots then read as
 * unverified, the safe side. Preallocated: tracing programs run anywhere.
 */
#define PLACE_ENTRIES 65536 /* live tasks; pkg/capture may resize it */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, PLACE_ENTRIES);
	__type(key, __u64);
	__type(value, struct image_place);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} image_places SEC(".maps");
#endif

/*
 * Pinned with the programs' links: while no agent runs, the probes keep
 * writing here, and the next agent reads the window's events on start.
 * What did not fit is counted in stats (STAT_RINGBUF_DROPS).
 */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 16 << 20);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} events SEC(".maps");

/* Monotonic counters, never reset; see enum stat_index. Pinned, so they
 * survive a restart and count what was lost while no agent read. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, STAT_MAX);
	__type(key, __u32);
	__type(value, __u64);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} stats SEC(".maps");

#ifdef CORRELATOR_COMPAT
/* struct scan_ctx's scalars, kept between the compat scan's calls (scan.h). */
struct scan_state {
	__u64 env_start;
	__u64 env_end;
	__u64 ptr_base;
	__u64 win_start;
	__u32 win_valid;
	__u32 n;
	__u32 found;
	__u32 flags;
	__u32 visited;
	__u32 _pad;
};
#endif

/*
 * win_slop keeps the scan's 8-byte load at any offset below WIN_SIZE inside
 * the buffer, so the offset's mask alone proves the load in bounds; at
 * carries the offset through memory (win_index in scan.h).
 */
struct scan_buf {
	__u64 ptrs[PTR_BLOCK];
	__u8 win[WIN_SIZE];
	__u8 win_slop[8];
	__u64 at;
#ifdef CORRELATOR_COMPAT
	struct scan_state st; /* the scan between scan_block calls (scan.h) */
#endif
};

/* Scratch space: events and buffers exceed the 512-byte BPF stack. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct scan_buf);
} scan_scratch SEC(".maps");

/*
 * An exec frame is assembled here: the fixed part, then the tail written
 * at running offsets, and only fixed part plus tail is sent. Offsets are
 * masked with a power of two no smaller than their true bound, so the
 * masks never change a value and the verifier sees every write in bounds.
 * The key slots are worked on in full form beside it.
 */
#define EXEC_TAIL_MASK 4095 /* the tail is at most 2,621 bytes */
#define EXIT_TAIL_MASK 1023 /* at most 798 */
#define SLOT_WIRE_MAX (sizeof(struct id_wire) + ID_MAX_LEN)

struct exec_buf {
	struct exec_event ev;
	__u8 tail[EXEC_TAIL_MASK + 1 + ARGV_MAX];
	struct id_slot ids[MAX_KEYS];     /* authoritative values (ids_mask) */
	struct id_slot claimed[MAX_KEYS]; /* env values (scan_ctx.found) */
	__u64 found; /* the scan's keys, reloaded past the scope check */
	__u64 kn;    /* the container cgroup's kernfs node, as a plain address */
};

struct exit_buf {
	struct exit_event ev;
	__u8 tail[EXIT_TAIL_MASK + 1 + SLOT_WIRE_MAX];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct exec_buf);
} exec_scratch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct lineage);
} lineage_scratch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct exit_buf);
} exit_scratch SEC(".maps");

static __always_inline void stat_inc(__u32 idx)
{
	__u64 *v = bpf_map_lookup_elem(&stats, &idx);

	if (v)
		*v += 1; /* per-CPU slot: no atomics needed */
}

/*
 * Waking the reader costs the exec'ing task an irq_work self-IPI, which in
 * a VM is a trap to the hypervisor worth more than the rest of the probe.
 * So events are queued silently and the reader is woken only once
 * wakeup_bytes have piled up; it also polls on a short deadline.
 */
const volatile __u64 wakeup_bytes = 256 << 10;

/* emit sends size bytes of ev; a frame that does not fit is counted. */
static __always_inline void emit(void *ev, __u64 size)
{
	__u64 flags = bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) >= wakeup_bytes
			      ? BPF_RB_FORCE_WAKEUP
			      : BPF_RB_NO_WAKEUP;

	if (bpf_ringbuf_output(&events, ev, size, flags))
		stat_inc(STAT_RINGBUF_DROPS);
}

#endif /* CORRELATOR_MAPS_H */
