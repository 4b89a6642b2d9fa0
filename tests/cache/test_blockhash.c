// SPDX-License-Identifier: MIT
/* Block keys: chaining (a change in block i changes h[i..] and nothing
 * before), every root field separates namespaces, a pinned known-answer key,
 * the partial tail is not a block, and the collision test hook truncates. */
#include <string.h>
#include <xxhash.h>

#include "blockhash.h"
#include "gguf.h"
#include "testutil.h"

#define B 32
#define NBLK 8
#define NTOK (NBLK * B + 5) /* a partial tail of 5 tokens */
/* Root of the known-answer params below under encoding "kvtier-block-root-v1". */
#define KA_ROOT_LO 0x3cb5c3d0ad0ab8ccull
#define KA_ROOT_HI 0xf0fa3c9d06d5cb6aull

static kvt_hash128 root_of(kvt_root_params p) {
    kvt_hash128 r = {0, 0};
    CHECK(kvt_block_root(&p, &r) == 0);
    return r;
}

static kvt_root_params base_params(void) {
    kvt_root_params p = kvt_root_default_params();
    p.fingerprint.lo = 0x1111;
    p.fingerprint.hi = 0x2222;
    p.kv_layout = "page:L,kv,T,Hkv,D";
    p.numerics = "kvt-numerics-1";
    return p;
}

static void test_chaining(void) {
    int32_t tok[NTOK];
    for (int i = 0; i < NTOK; i++) tok[i] = i * 7 + 3;
    kvt_hash128 root = root_of(base_params());
    kvt_hash128 h[NBLK], h2[NBLK];
    CHECK(kvt_block_hashes(root, tok, NTOK, B, h, NBLK) == NBLK);
    /* Chain definition holds. */
    CHECK(kvt_hash128_eq(h[0], kvt_block_hash(root, tok, B)));
    for (int i = 1; i < NBLK; i++) CHECK(kvt_hash128_eq(h[i], kvt_block_hash(h[i - 1], tok + i * B, B)));
    /* The partial tail does not matter. */
    int32_t tail_changed[NTOK];
    memcpy(tail_changed, tok, sizeof tok);
    tail_changed[NTOK - 1] ^= 1;
    CHECK(kvt_block_hashes(root, tail_changed, NTOK, B, h2, NBLK) == NBLK);
    CHECK(memcmp(h, h2, sizeof h) == 0);
    /* Changing one token of block i changes h[i..] only. */
    for (int blk = 0; blk < NBLK; blk++) {
        int32_t t2[NTOK];
        memcpy(t2, tok, sizeof tok);
        t2[blk * B + (blk * 5) % B] += 1;
        kvt_block_hashes(root, t2, NTOK, B, h2, NBLK);
        for (int i = 0; i < NBLK; i++) {
            if (i < blk) CHECKF(kvt_hash128_eq(h[i], h2[i]), "change in block %d altered h[%d]", blk, i);
            else CHECKF(!kvt_hash128_eq(h[i], h2[i]), "change in block %d kept h[%d]", blk, i);
        }
    }
    /* cap limits writes but the count is still the number of full blocks. */
    kvt_hash128 few[2] = {{0, 0}, {0, 0}};
    CHECK(kvt_block_hashes(root, tok, NTOK, B, few, 1) == NBLK);
    CHECK(kvt_hash128_eq(few[0], h[0]) && few[1].lo == 0 && few[1].hi == 0);
    CHECK(kvt_block_hashes(root, tok, B - 1, B, h2, NBLK) == 0);
}

static void test_roots(void) {
    static const char salt_a[] = "tenant-a", salt_b[] = "tenant-b";
    kvt_root_params v[9];
    for (int i = 0; i < 9; i++) v[i] = base_params();
    v[1].fingerprint.lo ^= 1;
    v[2].fingerprint.hi ^= 1;
    v[3].kv_dtype = KVT_TYPE_BF16;
    v[4].block_tokens = 16;
    v[5].numerics = "kvt-numerics-2";
    v[6].kv_layout = "page:L,T,kv,Hkv,D";
    v[7].salt = salt_a, v[7].salt_len = strlen(salt_a);
    v[8].salt = salt_b, v[8].salt_len = strlen(salt_b);
    kvt_hash128 r[9];
    for (int i = 0; i < 9; i++) r[i] = root_of(v[i]);
    for (int i = 0; i < 9; i++)
        for (int j = i + 1; j < 9; j++) CHECKF(!kvt_hash128_eq(r[i], r[j]), "roots %d and %d equal", i, j);
    /* Deterministic, and NULL strings mean "". */
    CHECK(kvt_hash128_eq(r[0], root_of(base_params())));
    kvt_root_params e1 = kvt_root_default_params(), e2 = e1;
    e2.kv_layout = NULL;
    e2.numerics = NULL;
    CHECK(kvt_hash128_eq(root_of(e1), root_of(e2)));
    /* Length prefixes keep field boundaries: ("ab","c") != ("a","bc"). */
    kvt_root_params s1 = base_params(), s2 = base_params();
    s1.kv_layout = "ab", s1.numerics = "c";
    s2.kv_layout = "a", s2.numerics = "bc";
    CHECK(!kvt_hash128_eq(root_of(s1), root_of(s2)));
    /* Same tokens under two salts: block keys differ at every block. */
    int32_t tok[2 * B];
    for (int i = 0; i < 2 * B; i++) tok[i] = i;
    kvt_hash128 ha[2], hb[2];
    kvt_block_hashes(r[7], tok, 2 * B, B, ha, 2);
    kvt_block_hashes(r[8], tok, 2 * B, B, hb, 2);
    CHECK(!kvt_hash128_eq(ha[0], hb[0]) && !kvt_hash128_eq(ha[1], hb[1]));
    /* Invalid parameters. */
    kvt_root_params bad = base_params();
    kvt_hash128 out;
    bad.block_tokens = 0;
    CHECK(kvt_block_root(&bad, &out) == KVT_EARG);
    bad.block_tokens = KVT_BLOCK_TOKENS_MAX + 1;
    CHECK(kvt_block_root(&bad, &out) == KVT_EARG);
    bad = base_params();
    bad.salt_len = 3;
    CHECK(kvt_block_root(&bad, &out) == KVT_EARG);
}

/* Pins the byte encoding: if this changes, every cached block on disk and in
 * remote stores silently stops matching, so it must be a deliberate bump. */
static void test_known_answer(void) {
    kvt_root_params p = kvt_root_default_params();
    p.fingerprint.lo = 1;
    p.fingerprint.hi = 2;
    p.block_tokens = 4;
    kvt_hash128 r = root_of(p);
    int32_t tok[4] = {1, -2, 300000, 4};
    kvt_hash128 h = kvt_block_hash(r, tok, 4);
    printf("known answer: root %016llx%016llx block %016llx%016llx\n", (unsigned long long)r.hi,
           (unsigned long long)r.lo, (unsigned long long)h.hi, (unsigned long long)h.lo);
    CHECK(r.lo == KA_ROOT_LO && r.hi == KA_ROOT_HI);
    /* A block key is XXH3-128 of parent.lo, parent.hi (LE u64) then the
     * tokens as LE int32, spelled out byte by byte here. */
    const uint8_t bytes[] = {
        0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, /* parent.lo */
        0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, /* parent.hi */
        0x01, 0x00, 0x00, 0x00, 0xfe, 0xff, 0xff, 0xff, /* 1, -2 */
        0xe0, 0x93, 0x04, 0x00, 0x04, 0x00, 0x00, 0x00, /* 300000, 4 */
    };
    kvt_hash128 parent = {0x0807060504030201ull, 0x1817161514131211ull};
    XXH128_hash_t want = XXH3_128bits(bytes, sizeof bytes);
    kvt_hash128 got = kvt_block_hash(parent, tok, 4);
    CHECK(got.lo == want.low64 && got.hi == want.high64);
}

static void test_hook(void) {
    int32_t tok[B];
    for (int i = 0; i < B; i++) tok[i] = i;
    kvt_hash128 root = root_of(base_params());
    kvt_hash128 full = kvt_block_hash(root, tok, B);
    kvt_blockhash_test_bits = 3;
    kvt_hash128 t = kvt_block_hash(root, tok, B);
    kvt_blockhash_test_bits = 0;
    CHECK(t.hi == 0 && t.lo < 8 && t.lo == (full.lo & 7));
    CHECK(kvt_hash128_eq(full, kvt_block_hash(root, tok, B)));
}

int main(void) {
    test_chaining();
    test_roots();
    test_known_answer();
    test_hook();
    return kvt_test_done("test_blockhash");
}
