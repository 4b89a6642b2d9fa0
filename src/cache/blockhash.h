// SPDX-License-Identifier: MIT
/* Chained 128-bit block keys (docs/design.md "Blocks and keys"): the root that
 * namespaces every key by model, KV layout, dtype, block size, numerics and
 * tenant, and the per-block chain h[i] = H(h[i-1], tokens of block i). */
#ifndef KVT_BLOCKHASH_H
#define KVT_BLOCKHASH_H

#include <stddef.h>
#include <stdint.h>

#include "hash128.h"
#include "kvtier.h"

/* Largest block size (tokens per block) kvtier accepts. Bounds the on-stack
 * hashing buffer; real configurations use 16..256. */
#define KVT_BLOCK_TOKENS_MAX 1024
/* Default block size B (docs/design.md "Blocks and keys"). */
#define KVT_BLOCK_TOKENS_DEFAULT 32


/* Everything that makes a block's K/V bytes differ for the same tokens. Two
 * roots are equal only if every field is. Strings are NUL-terminated; NULL
 * means "". The struct only borrows the strings and the salt. */
typedef struct {
    kvt_fingerprint fingerprint; /* kvt_model_fingerprint() */
    const char *kv_layout;       /* how K/V sit in a block, e.g. "page:L,kv,T,Hkv,D" */
    uint32_t kv_dtype;           /* ggml type id of stored K/V (enum kvt_ggml_type) */
    uint32_t block_tokens;       /* B: 1..KVT_BLOCK_TOKENS_MAX */
    const char *numerics;        /* engine numerics version: kernels + reduction order */
    const void *salt;            /* tenant salt bytes; may be NULL when salt_len == 0 */
    size_t salt_len;             /* 0 by default: all tenants share */
} kvt_root_params;

/* Defaults: zero fingerprint, empty layout/numerics/salt, KVT_TYPE_F16, B = 32. The
 * caller must at least set the fingerprint. */
kvt_root_params kvt_root_default_params(void);

/* Computes the root key of a namespace. Returns 0, or KVT_EARG (block_tokens
 * out of range, or salt NULL with salt_len > 0), or -ENOMEM. Pure; thread-safe. */
int kvt_block_root(const kvt_root_params *p, kvt_hash128 *out);

/* Key of one block: H(parent, tokens[0..B)). Tokens are hashed as fixed-width
 * little-endian int32, so keys agree across platforms. B must be in
 * 1..KVT_BLOCK_TOKENS_MAX (asserted: callers validated it via the root).
 * Pure (apart from the test hook below); thread-safe. */
kvt_hash128 kvt_block_hash(kvt_hash128 parent, const int32_t *tokens, uint32_t B);

/* Keys of every full block of tokens[0..n): out[i] = h[i] for i < n / B (a
 * partial tail is not a block). Writes at most cap keys; returns n / B (the
 * number of full blocks), which may exceed cap. Thread-safe. */
size_t kvt_block_hashes(kvt_hash128 root, const int32_t *tokens, size_t n, uint32_t B, kvt_hash128 *out, size_t cap);

/* TEST HOOK: when nonzero (1..63), every block key (not the root) is truncated
 * to its low kvt_blockhash_test_bits bits, so tests can force collisions and
 * prove a collision yields a miss, never another sequence's KV. 0 (the
 * default) disables it. Not for production; not thread-safe to change while
 * keys are being computed. */
extern unsigned kvt_blockhash_test_bits;

#endif
