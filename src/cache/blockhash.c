// SPDX-License-Identifier: MIT
/* Chained block keys over XXH3-128. The byte encoding of every hashed field is
 * fixed (little-endian, length-prefixed strings) so a key computed on one
 * machine names the same block on every other (shared T2/T3 tiers). */
#include "blockhash.h"

#include <assert.h>
#include <errno.h>
#include <string.h>
#include <xxhash.h>

#include "common.h"
#include "gguf.h"

/* Version tag of the root encoding: bump it when any hashed field changes, so
 * old cached blocks simply stop matching. */
#define ROOT_DOMAIN "kvtier-block-root-v1"
#define PARENT_BYTES (2 * sizeof(uint64_t))
#define TOKEN_BYTES sizeof(int32_t)

unsigned kvt_blockhash_test_bits;

kvt_root_params kvt_root_default_params(void) {
    kvt_root_params p;
    memset(&p, 0, sizeof p);
    p.kv_layout = "";
    p.kv_dtype = KVT_TYPE_F16;
    p.block_tokens = KVT_BLOCK_TOKENS_DEFAULT;
    p.numerics = "";
    return p;
}

static void put_le64(uint8_t *dst, uint64_t v) {
    for (size_t i = 0; i < sizeof v; i++) dst[i] = (uint8_t)(v >> (8 * i));
}

static void hash_le64(XXH3_state_t *s, uint64_t v) {
    uint8_t b[sizeof v];
    put_le64(b, v);
    XXH3_128bits_update(s, b, sizeof b);
}

/* Length-prefixed, so ("ab","c") and ("a","bc") hash differently. */
static void hash_bytes(XXH3_state_t *s, const void *p, size_t n) {
    hash_le64(s, (uint64_t)n);
    if (n) XXH3_128bits_update(s, p, n);
}

static void hash_str(XXH3_state_t *s, const char *str) {
    if (!str) str = "";
    hash_bytes(s, str, strlen(str));
}

int kvt_block_root(const kvt_root_params *p, kvt_hash128 *out) {
    if (p->block_tokens == 0 || p->block_tokens > KVT_BLOCK_TOKENS_MAX)
        return kvt_fail(KVT_EARG, "block size %u outside 1..%d", p->block_tokens, KVT_BLOCK_TOKENS_MAX);
    if (!p->salt && p->salt_len) return kvt_fail(KVT_EARG, "salt is NULL but salt_len is %zu", p->salt_len);
    /* Roots are computed once per model/tenant, so the heap state is fine. */
    XXH3_state_t *st = XXH3_createState();
    if (!st) return kvt_fail(-ENOMEM, "out of memory for a hash state");
    XXH3_128bits_reset(st);
    hash_bytes(st, ROOT_DOMAIN, sizeof ROOT_DOMAIN - 1);
    hash_le64(st, p->fingerprint.lo);
    hash_le64(st, p->fingerprint.hi);
    hash_str(st, p->kv_layout);
    hash_le64(st, p->kv_dtype);
    hash_le64(st, p->block_tokens);
    hash_str(st, p->numerics);
    hash_bytes(st, p->salt, p->salt_len);
    XXH128_hash_t h = XXH3_128bits_digest(st);
    XXH3_freeState(st);
    out->lo = h.low64;
    out->hi = h.high64;
    return 0;
}

kvt_hash128 kvt_block_hash(kvt_hash128 parent, const int32_t *tokens, uint32_t B) {
    assert(B >= 1 && B <= KVT_BLOCK_TOKENS_MAX);
    /* One contiguous buffer and a one-shot XXH3 call: several times faster
     * than the streaming API for inputs this small. */
    uint8_t buf[PARENT_BYTES + KVT_BLOCK_TOKENS_MAX * TOKEN_BYTES];
    put_le64(buf, parent.lo);
    put_le64(buf + sizeof(uint64_t), parent.hi);
    uint8_t *t = buf + PARENT_BYTES;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    memcpy(t, tokens, (size_t)B * TOKEN_BYTES);
#else
    for (uint32_t i = 0; i < B; i++) {
        uint32_t v = (uint32_t)tokens[i];
        for (size_t k = 0; k < TOKEN_BYTES; k++) t[i * TOKEN_BYTES + k] = (uint8_t)(v >> (8 * k));
    }
#endif
    XXH128_hash_t h = XXH3_128bits(buf, PARENT_BYTES + (size_t)B * TOKEN_BYTES);
    kvt_hash128 r = {h.low64, h.high64};
    if (kvt_blockhash_test_bits) {
        unsigned bits = KVT_MIN(kvt_blockhash_test_bits, 63u);
        r.lo &= ((uint64_t)1 << bits) - 1;
        r.hi = 0;
    }
    return r;
}

size_t kvt_block_hashes(kvt_hash128 root, const int32_t *tokens, size_t n, uint32_t B, kvt_hash128 *out, size_t cap) {
    size_t nb = n / B;
    kvt_hash128 h = root;
    for (size_t i = 0; i < nb && i < cap; i++) {
        h = kvt_block_hash(h, tokens + i * B, B);
        out[i] = h;
    }
    return nb;
}
