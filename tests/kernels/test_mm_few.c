// SPDX-License-Identifier: MIT
/* Batch invariance of the few-token matmuls (several sequences decoding in
 * one step): for 1 to 9 tokens, and around the count where the Q8_0 kernels
 * switch from their decode tiles to the prefill ones (15, 16, 17), every
 * token's outputs are bit for bit those of that token alone, and those are
 * the scalar variant's, in every SIMD variant (avx2, avx512, amx where the
 * CPU has them), with 1 to 3 threads (each a different split of the rows).
 * Weights: F16, Q8_0 in both orders, Q4_K and Q6_K (the Q4_K_M mix), at row
 * counts that are no multiple of any tile's rows, rows starting unaligned,
 * and Y rows wider than the matrix (the gap must stay unwritten). Q4_K and
 * Q6_K also run with rows so long that the AVX-512 prefill kernel stages 16
 * tokens per chunk (17 tokens: two chunks). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops.h"
#include "quant_k.h"
#include "testutil.h"
#include "threadpool.h"

#define NTOK 40 /* tokens to pick the batches from */
#define NPOOLS 3
#define Q8_BLOCK 32 /* Q8_0: an f16 scale, then 32 int8 codes */
#define Q8_BYTES 34

static uint64_t rng = 0x9b1e5f2a7c3d4e61ull;
static uint32_t rnd32(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)(rng >> 11);
}
static float rndf(void) { return (float)(rnd32() % 20001) / 10000.0f - 1.0f; } /* [-1, 1] */

static void put_f16(uint8_t *p, float v) {
    const uint16_t h = kvt_f32_to_f16(v);
    memcpy(p, &h, sizeof h);
}

/* rows x cols weights of type: random codes (every byte value), finite f16
 * scales; one byte into the buffer, so rows are unaligned. */
static uint8_t *make_weights(uint32_t type, int64_t rows, int64_t cols, kvt_wmat *w) {
    const size_t rb = kvt_wmat_row_bytes(type, cols), bytes = rb * (size_t)rows;
    uint8_t *buf = malloc(bytes + 1);
    if (!buf) return NULL;
    uint8_t *base = buf + 1;
    for (size_t i = 0; i < bytes; i++) base[i] = (uint8_t)rnd32();
    *w = (kvt_wmat){.type = type, .rows = rows, .cols = cols, .data = base, .row_bytes = rb};
    for (int64_t r = 0; r < rows; r++) {
        uint8_t *row = base + (size_t)r * rb;
        if (type == KVT_TYPE_F16) {
            for (int64_t k = 0; k < cols; k++) put_f16(row + 2 * k, rndf());
        } else if (type == KVT_TYPE_Q8_0) {
            for (int64_t b = 0; b < cols / Q8_BLOCK; b++)
                put_f16(row + b * Q8_BYTES, 0.001f + 0.03f * (float)(rnd32() % 1000) / 1000.0f);
        } else {
            const size_t bb = kvt_qk_block_bytes(type);
            for (int64_t b = 0; b < cols / KVT_QK; b++) {
                uint8_t *blk = row + (size_t)b * bb;
                const float d = 0.001f + 0.002f * (float)(rnd32() % 100) / 100.0f;
                if (type == KVT_TYPE_Q6_K) {
                    put_f16(blk + KVT_Q6K_D, d);
                } else {
                    put_f16(blk + KVT_Q45K_D, d);
                    put_f16(blk + KVT_Q45K_DMIN, 0.002f * (float)(rnd32() % 100) / 100.0f);
                }
            }
        }
    }
    return buf;
}

/* Y of each token alone, then of every batch size and thread count, in each
 * variant: token rows against the scalar variant's single-token rows. */
static void check_type(kvt_pool **pools, uint32_t type, int64_t rows, int64_t cols) {
    static const int64_t ns[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 15, 16, 17};
    static const char *const simd[] = {"avx2", "avx512", "amx"};
    kvt_wmat w;
    uint8_t *buf = make_weights(type, rows, cols, &w);
    const int64_t ldx = cols + 3, ldy = rows + 2;
    float *x = malloc(sizeof(float) * (size_t)(NTOK * ldx));
    float *ref = malloc(sizeof(float) * (size_t)(NTOK * rows)), *one = malloc(sizeof(float) * (size_t)(NTOK * rows));
    float *y = malloc(sizeof(float) * (size_t)(NTOK * ldy));
    CHECK(buf && x && ref && one && y);
    if (!buf || !x || !ref || !one || !y) goto out;
    for (int64_t i = 0; i < NTOK * ldx; i++) x[i] = rndf() * (i % 17 == 0 ? 20.0f : 1.0f);
    CHECK(kvt_ops_force_variant("scalar") == 0);
    for (int64_t t = 0; t < NTOK; t++) kvt_matmul(NULL, &w, x + t * ldx, ldx, 1, ref + t * rows, rows);
    for (size_t v = 0; v < sizeof simd / sizeof simd[0]; v++) {
        if (kvt_ops_force_variant(simd[v]) != 0) {
            printf("variant %s not available here\n", simd[v]);
            continue;
        }
        for (int64_t t = 0; t < NTOK; t++) kvt_matmul(NULL, &w, x + t * ldx, ldx, 1, one + t * rows, rows);
        CHECKF(!memcmp(one, ref, sizeof(float) * (size_t)(NTOK * rows)),
               "%s type %u (%s): one token differs from scalar", simd[v], type, kvt_ops_q8_order());
        for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++)
            for (int p = 0; p < NPOOLS; p++) {
                const int64_t n = ns[ni], start = (n * 7 + p) % (NTOK - n + 1);
                for (int64_t i = 0; i < n * ldy; i++) y[i] = NAN;
                kvt_matmul(pools[p], &w, x + start * ldx, ldx, n, y, ldy);
                int bad = 0, gaps = 0;
                for (int64_t t = 0; t < n; t++) {
                    bad += memcmp(y + t * ldy, ref + (start + t) * rows, sizeof(float) * (size_t)rows) != 0;
                    for (int64_t r = rows; r < ldy; r++) gaps += !isnan(y[t * ldy + r]);
                }
                CHECKF(bad == 0 && gaps == 0,
                       "%s type %u (%s), %lld x %lld, n %lld, %d threads: %d token rows differ from alone, %d gaps "
                       "written",
                       simd[v], type, kvt_ops_q8_order(), (long long)rows, (long long)cols, (long long)n, p + 1, bad,
                       gaps);
            }
    }
out:
    kvt_ops_force_variant("scalar");
    free(buf), free(x), free(ref), free(one), free(y);
}

int main(void) {
    kvt_pool *pools[NPOOLS] = {kvt_pool_new(1), kvt_pool_new(2), kvt_pool_new(3)};
    CHECK(pools[0] && pools[1] && pools[2]);
    /* rows: 45 fits no tile's row count (4, 8, 16); 1 is a lone row */
    static const int64_t rows[] = {1, 45};
    for (size_t ri = 0; ri < sizeof rows / sizeof rows[0]; ri++) {
        check_type(pools, KVT_TYPE_F16, rows[ri], 200);
        check_type(pools, KVT_TYPE_Q4_K, rows[ri], 512);
        check_type(pools, KVT_TYPE_Q6_K, rows[ri], 512);
        /* staging 16 tokens of these rows takes more than the kernel's 1 MiB chunk */
        check_type(pools, KVT_TYPE_Q4_K, rows[ri] % 8, 239 * KVT_QK);
        check_type(pools, KVT_TYPE_Q6_K, rows[ri] % 8, 239 * KVT_QK);
        static const char *const orders[] = {"lanes", "block"};
        for (int o = 0; o < 2; o++) {
            CHECK(kvt_ops_set_q8_order(orders[o]) == 0);
            check_type(pools, KVT_TYPE_Q8_0, rows[ri], 32);
            check_type(pools, KVT_TYPE_Q8_0, rows[ri], 1024);
        }
        CHECK(kvt_ops_set_q8_order("lanes") == 0);
    }
    for (int i = 0; i < NPOOLS; i++) kvt_pool_free(pools[i]);
    return kvt_test_done("test_mm_few");
}
