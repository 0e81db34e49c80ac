/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Environment scan. The kernel lays the new image's environment out as
 * NUL-terminated strings in mm->env_start..env_end and writes an envp
 * pointer table on the new stack; both are committed before the process
 * runs, so nothing in userspace can race the read. The pointer table gives
 * every variable's start, so the scan visits variables, not bytes: a
 * variable is a key only where a string starts, never after a newline
 * inside a multi-line value (KEP-3721).
 */
#ifndef CORRELATOR_SCAN_H
#define CORRELATOR_SCAN_H

#include "maps.h"

/* Load-time configuration, set by pkg/capture before loading. */
const volatile __u32 nkeys = 0;
const volatile __u32 key_len[MAX_KEYS] = {};
const volatile __u64 key_prefix[MAX_KEYS] = {}; /* first bytes of "KEY=" */
const volatile __u64 key_mask[MAX_KEYS] = {};
const volatile __u8 key_name[MAX_KEYS][KEY_MAX_LEN] = {};
const volatile __u32 scan_budget = 1 << 20;     /* env bytes */

struct scan_ctx {
	struct scan_buf *buf;
	struct exec_buf *eb; /* claimed[] receives the env values */
	__u64 env_start;
	__u64 env_end;
	__u64 ptr_base;  /* user address of envp[0] */
	__u64 win_start; /* env offset of buf->win[0] */
	__u32 win_valid; /* 0 until the first window is read */
	__u32 n;         /* variables to visit */
	__u32 found;     /* bit k: key k found */
	__u32 flags;     /* enum event_flag */
	__u32 visited;
	__u32 _pad;
};

#define WIN_MASK (WIN_SIZE - 1)

/*
 * win_index returns an offset already checked below WIN_LIMIT, masked (so
 * the mask never changes it), after a round trip through the scratch map.
 * The round trip hides the check from the compiler, which would otherwise
 * fold the mask away, and hands the verifier a fresh scalar whose only
 * bound is the mask: every copy of it, spilled or not, is in bounds (with
 * win_slop, even for the 8-byte load at the last offset). The check alone
 * was not enough: the compiler spilled the offset before comparing it, and
 * 6.1's verifier does not carry a bound learned by a comparison to a copy
 * spilled before it (6.12's does), so it refused the load ("R6 min value is
 * negative"). A mask in an asm statement also passes 6.1, but 6.18 then
 * walked three times the states (850k of its 1M instructions), seemingly
 * tracking the offset's precision back into scan_ctx; a scalar loaded from
 * a map has no history to track.
 */
static __always_inline __u32 win_index(struct scan_buf *buf, __u32 o)
{
	*(volatile __u64 *)&buf->at = o;
	return *(volatile __u64 *)&buf->at & WIN_MASK;
}

/* Compares bytes 8..len of "KEY=" at win[o]; the first 8 came from the prefix. */
static __always_inline bool key_tail_matches(struct scan_buf *buf, __u32 o, __u32 k)
{
	__u32 klen = key_len[k & (MAX_KEYS - 1)];

	for (__u32 j = 8; j < KEY_MAX_LEN + 1; j++) {
		__u8 want;

		if (j > klen)
			break;
		want = j == klen ? '=' : key_name[k & (MAX_KEYS - 1)][j & (KEY_MAX_LEN - 1)];
		if (buf->win[(o + j) & WIN_MASK] != want)
			return false;
	}
	return true;
}

/* take_value fills claimed[k] whole: the scratch slot is not cleared first. */
static __always_inline void take_value(struct scan_ctx *c, __u32 o, __u32 k)
{
	struct id_slot *s = &c->eb->claimed[k & (MAX_KEYS - 1)];
	__u32 v = o + key_len[k & (MAX_KEYS - 1)] + 1;
	__u32 j;

	for (j = 0; j < ID_MAX_LEN; j++) {
		__u8 ch = c->buf->win[(v + j) & WIN_MASK];

		if (!ch)
			break;
		s->value[j] = ch;
	}
	s->len = j;
	s->source = ID_SOURCE_ENV;
	s->_pad0 = 0;
	s->flags = 0;
	if (j == ID_MAX_LEN && c->buf->win[(v + j) & WIN_MASK])
		s->flags |= KEY_FLAG_ID_TRUNCATED;
}

/* scan_one visits envp[i]; non-zero stops the scan. */
static __always_inline long scan_one(__u64 i, struct scan_ctx *c)
{
	struct scan_buf *buf = c->buf;
	__u32 slot = i & (PTR_BLOCK - 1);
	__u64 p, off;
	__u32 o;

	if (slot == 0) {
		__u64 left = c->n - i;
		__u32 sz = left >= PTR_BLOCK ? PTR_BLOCK * 8 : (__u32)left * 8;

		if (sz > PTR_BLOCK * 8)
			sz = PTR_BLOCK * 8;
		if (bpf_probe_read_user(buf->ptrs, sz, (void *)(c->ptr_base + i * 8))) {
			c->flags |= EVENT_FLAG_SCAN_ERROR;
			return 1;
		}
	}
	p = buf->ptrs[slot];
	if (p < c->env_start || p >= c->env_end) {
		c->flags |= EVENT_FLAG_SCAN_ERROR;
		return 1;
	}
	off = p - c->env_start;
	if (off >= scan_budget) {
		c->flags |= EVENT_FLAG_SCAN_TRUNCATED;
		return 1;
	}
	if (!c->win_valid || off < c->win_start || off - c->win_start >= WIN_LIMIT) {
		__u64 len = c->env_end - p;

		if (len > WIN_SIZE)
			len = WIN_SIZE;
		if (bpf_probe_read_user(buf->win, len, (void *)p)) {
			c->flags |= EVENT_FLAG_SCAN_ERROR;
			return 1;
		}
		c->win_start = off;
		c->win_valid = 1;
		o = 0;
	} else {
		/* Below WIN_LIMIT: the window holds it (the test above). */
		o = win_index(buf, off - c->win_start);
	}
	c->visited++;

	{
		/* Unaligned 8-byte load: a key cannot match across the string's NUL. */
		__u64 w = *(__u64 *)&buf->win[o];

#pragma unroll
		for (__u32 k = 0; k < MAX_KEYS; k++) {
			if (k >= nkeys)
				break;
			if ((w & key_mask[k]) != key_prefix[k])
				continue;
			if (!key_tail_matches(buf, o, k))
				continue;
			if (c->found & (1u << k)) {
				/* getenv returns the first; later ones are evidence. */
				c->eb->claimed[k].flags |= KEY_FLAG_DUPLICATE_KEY;
				continue;
			}
			c->found |= 1u << k;
			take_value(c, o, k);
		}
	}
	return 0;
}

#ifndef CORRELATOR_COMPAT
/*
 * scan_stride is the bpf_loop callback: it visits SCAN_STRIDE variables,
 * so the loop's per-call cost is paid once per stride, not per variable.
 */
static long scan_stride(__u64 blk, struct scan_ctx *c)
{
	__u64 i = blk * SCAN_STRIDE;

#pragma unroll
	for (__u32 j = 0; j < SCAN_STRIDE; j++, i++) {
		if (i >= c->n || scan_one(i, c))
			return 1;
	}
	return 0;
}
#endif

#ifdef CORRELATOR_COMPAT
/*
 * The compat object's scan, for kernels without bpf_loop (< 5.17) and
 * without callbacks at all (< 5.13): global functions in bounded loops.
 * A global function is verified once, on its own, whatever calls it and
 * however often, so the loops cost the verifier one pass over a block of
 * SCAN_BLOCK variables, and SCAN_SPANS * SCAN_SPAN calls of it visit as many
 * variables as bpf_loop may (MAX_ENV_VARS). 5.10 passes a global function
 * only scalars, so the scan's state lives in the scratch map between calls
 * (scan_buf.st) and each block looks its buffers up itself.
 */
#define SCAN_BLOCK 8                  /* variables per scan_block call (16: 439k insns on 6.18, 4: verifier bug) */
#define SCAN_SPAN 1024                /* scan_block calls per scan_span call */
#define SCAN_SPANS ((1 << 23) / (SCAN_BLOCK * SCAN_SPAN)) /* MAX_ENV_VARS */

static __always_inline void scan_save(struct scan_state *s, const struct scan_ctx *c)
{
	s->env_start = c->env_start;
	s->env_end = c->env_end;
	s->ptr_base = c->ptr_base;
	s->win_start = c->win_start;
	s->win_valid = c->win_valid;
	s->n = c->n;
	s->found = c->found;
	s->flags = c->flags;
	s->visited = c->visited;
	s->_pad = 0;
}

static __always_inline void scan_restore(struct scan_ctx *c, const struct scan_state *s)
{
	c->env_start = s->env_start;
	c->env_end = s->env_end;
	c->ptr_base = s->ptr_base;
	c->win_start = s->win_start;
	c->win_valid = s->win_valid;
	c->n = s->n;
	c->found = s->found;
	c->flags = s->flags;
	c->visited = s->visited;
}

/* scan_block visits variables blk * SCAN_BLOCK on; non-zero stops the scan. */
__noinline int scan_block(__u32 blk)
{
	__u32 zero = 0;
	struct scan_buf *buf = bpf_map_lookup_elem(&scan_scratch, &zero);
	struct exec_buf *eb = bpf_map_lookup_elem(&exec_scratch, &zero);
	struct scan_ctx c = {};
	__u64 i = (__u64)blk * SCAN_BLOCK;
	int stop = 0;

	if (!buf || !eb)
		return 1;
	scan_restore(&c, &buf->st);
	c.buf = buf;
	c.eb = eb;
	for (__u32 j = 0; j < SCAN_BLOCK; j++, i++) {
		if (i >= c.n || scan_one(i, &c)) {
			stop = 1;
			break;
		}
	}
	scan_save(&buf->st, &c);
	return stop;
}

/* scan_span runs SCAN_SPAN blocks from span * SCAN_SPAN on. */
__noinline int scan_span(__u32 span)
{
	__u32 blk = span * SCAN_SPAN;

	for (__u32 j = 0; j < SCAN_SPAN; j++, blk++)
		if (scan_block(blk))
			return 1;
	return 0;
}

/* scan_all visits c->n variables, as bpf_loop over scan_stride would. */
static __always_inline void scan_all(struct scan_ctx *c)
{
	struct scan_buf *buf = c->buf;

	scan_save(&buf->st, c);
	for (__u32 s = 0; s < SCAN_SPANS; s++) {
		if ((__u64)s * SCAN_BLOCK * SCAN_SPAN >= c->n || scan_span(s))
			break;
	}
	/* The same per-CPU slot the blocks used: a probe does not preempt itself. */
	scan_restore(c, &buf->st);
	c->buf = buf;
}
#endif

#endif /* CORRELATOR_SCAN_H */
