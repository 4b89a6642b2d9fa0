// SPDX-License-Identifier: MIT
/* The last prompts the server ran, by tenant, for GET /v1/cache/lint: a ring
 * of at most `cap` prompts (token ids and the tenant salt, copied), the oldest
 * overwritten first. Memory is bounded by cap * (longest prompt). The ring
 * holds prompt text: only the operator reads it (the lint is admin-only).
 *
 * Thread-safety: every function may be called from any thread (own mutex). */
#ifndef KVT_PROMPT_RING_H
#define KVT_PROMPT_RING_H

#include <stddef.h>
#include <stdint.h>

#include "lint.h"

#define KVT_PROMPT_RING_DEFAULT 64

typedef struct kvt_prompt_ring kvt_prompt_ring;

kvt_prompt_ring *kvt_prompt_ring_new(int32_t cap);
void kvt_prompt_ring_free(kvt_prompt_ring *r);
/* Remembers tokens[0..n) under salt[0..salt_len) (both copied). */
void kvt_prompt_ring_put(kvt_prompt_ring *r, const void *salt, size_t salt_len, const int32_t *tokens, int32_t n);
/* Copies the last at most max prompts stored under exactly this salt (salt
 * NULL: under any), oldest first, into a malloc'd *out (free with kvt_prompt_ring_release). Returns
 * their number (0: *out NULL). */
int32_t kvt_prompt_ring_take(kvt_prompt_ring *r, const void *salt, size_t salt_len, int32_t max, kvt_lint_prompt **out);
void kvt_prompt_ring_release(kvt_lint_prompt *p, int32_t n);

#endif
