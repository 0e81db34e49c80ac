/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The exec bridge (pkg/bridge, `correlator bridge`) is a mutating admission
 * webhook that rewrites a covered exec's command to `env KEY=<id> <command>`.
 * For a root the runtime exec'd, that argv came from the apiserver's
 * mutated request, so the ID is the runtime's word, like an injected
 * variable: argv_claim reads it from the new image's argv (already in the
 * frame's tail) into claimed[argv_key]. The lineage then judges the root by
 * its origin as for any key, and env's exec of the command, in the same
 * process, inherits it.
 */
#ifndef CORRELATOR_BRIDGE_H
#define CORRELATOR_BRIDGE_H

#include "maps.h"
#include "scan.h"

/* Index of the key the bridge puts in a root's argv; MAX_KEYS: none. */
const volatile __u32 argv_key = MAX_KEYS;

#define ARGV_MASK (EXEC_TAIL_MASK)

/* tail_at is the byte at argv offset i, or 0 past the argv read. */
static __always_inline __u8 tail_at(struct exec_buf *b, __u32 base, __u32 i)
{
	if (i >= b->ev.argv_len)
		return 0;
	return b->tail[(base + i) & ARGV_MASK];
}

/*
 * argv_claim returns bit argv_key when argv is `env KEY=value ...` with
 * argv[0] exactly "env", as the bridge writes it, and puts value in
 * claimed[argv_key]. Fixed offsets keep the verifier's paths few: only
 * the value's length varies.
 */
static __always_inline __u32 argv_claim(struct exec_buf *b)
{
	__u32 k = argv_key, base, i, v, klen;
	struct id_slot *s;

	if (k >= MAX_KEYS || k >= nkeys || b->ev.argv_len < 6)
		return 0;
	base = b->ev.filename_len & (FILENAME_MAX_LEN - 1);
	if (tail_at(b, base, 0) != 'e' || tail_at(b, base, 1) != 'n' || tail_at(b, base, 2) != 'v' ||
	    tail_at(b, base, 3) != 0)
		return 0;
	klen = key_len[k & (MAX_KEYS - 1)];
	if (klen > KEY_MAX_LEN)
		return 0;
	for (i = 0; i < KEY_MAX_LEN + 1; i++) {
		__u8 want;

		if (i > klen)
			break;
		want = i == klen ? '=' : key_name[k & (MAX_KEYS - 1)][i & (KEY_MAX_LEN - 1)];
		if (tail_at(b, base, 4 + i) != want)
			return 0;
	}
	v = 4 + klen + 1;
	s = &b->claimed[k & (MAX_KEYS - 1)];
	for (i = 0; i < ID_MAX_LEN; i++) {
		__u8 ch = tail_at(b, base, v + i);

		if (!ch)
			break;
		s->value[i] = ch;
	}
	s->len = i;
	s->source = ID_SOURCE_ENV;
	s->_pad0 = 0;
	s->flags = KEY_FLAG_FROM_ARGV;
	if (i == ID_MAX_LEN && tail_at(b, base, v + i))
		s->flags |= KEY_FLAG_ID_TRUNCATED;
	return 1u << k;
}

#endif /* CORRELATOR_BRIDGE_H */
