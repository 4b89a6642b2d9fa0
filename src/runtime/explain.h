// SPDX-License-Identifier: MIT
/* Words for a kvt_reuse_stop (docs/api.md "Why did this miss?"): the differing
 * token texts and a one-line summary, shared by `kvtier run` and the server
 * so both say the same thing. */
#ifndef KVT_EXPLAIN_H
#define KVT_EXPLAIN_H

#include <stddef.h>

#include "kvtier.h"
#include "tokenizer.h"

/* Text of ids[0..n) (special tokens rendered) into buf[0..cap), NUL-terminated,
 * cut short at cap - 1 bytes. Bytes are as the tokenizer gives them: a cut
 * token may leave an incomplete UTF-8 sequence (JSON callers sanitize).
 * An invalid id yields "". Returns buf. */
char *kvt_reuse_stop_text(const kvt_tokenizer *t, const int32_t *ids, int32_t n, char *buf, size_t cap);

/* The short form for a stats line into buf: "reason@block/token_offset", plus
 * for diverged ' "prompt text" vs "cached text"' with control characters
 * escaped. t may be NULL (no texts). Returns buf. */
char *kvt_reuse_stop_line(const kvt_tokenizer *t, const kvt_reuse_stop *s, char *buf, size_t cap);

#endif
