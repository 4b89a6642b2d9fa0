// SPDX-License-Identifier: MIT
/* The Q8_0 prefill kernels' edges, in both orders: every variant gives the
 * scalar variant's bits at the shapes where a kernel changes its tiling.
 * The AVX-512 "lanes" kernel (ops_q8l_avx512.c) takes 16 tokens per vector
 * from 8 tokens on, rows in pairs, and stages the activations in chunks of
 * about 1 MiB (224 tokens at 4096 columns), so the cases cross each of
 * those: 7/8/9, 16/17 and 250 tokens, odd row counts, one block and 128
 * blocks per row, thread counts 1-3 (each thread a row range). The AMX
 * "block" kernel takes rows by 16 and tokens from 3 on. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops.h"
#include "testutil.h"
#include "threadpool.h"

static uint64_t rng = 0x2545f4914f6cdd1dull;
static uint32_t rnd32(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)(rng >> 11);
}

/* rows x cols Q8_0 weights: random f16 scales and every int8 value, -128 included */
static uint8_t *make_q8(int64_t rows, int64_t cols, kvt_wmat *w) {
    const size_t rb = kvt_wmat_row_bytes(KVT_TYPE_Q8_0, cols);
    uint8_t *buf = malloc(rb * (size_t)rows + 1);
    if (!buf) return NULL;
    for (size_t i = 0; i < rb * (size_t)rows + 1; i++) buf[i] = (uint8_t)rnd32();
    /* one byte in: the kernels must not need aligned rows */
    *w = (kvt_wmat){.type = KVT_TYPE_Q8_0, .rows = rows, .cols = cols, .data = buf + 1, .row_bytes = rb};
    for (int64_t r = 0; r < rows; r++)
        for (int64_t b = 0; b < cols / 32; b++) {
            const uint16_t d = kvt_f32_to_f16(0.001f + 0.03f * (float)(rnd32() % 1000) / 1000.0f);
            memcpy(buf + 1 + (size_t)r * rb + (size_t)b * 34, &d, 2);
        }
    return buf;
}

/* One shape: Y from each variant and pool against the scalar variant's. */
static void check_shape(kvt_pool **pools, int64_t rows, int64_t cols, int64_t n) {
    kvt_wmat w;
    uint8_t *buf = make_q8(rows, cols, &w);
    const int64_t ldx = cols + 5, ldy = rows + 3;
    float *x = malloc(sizeof(float) * (size_t)(n * ldx));
    float *ref = malloc(sizeof(float) * (size_t)(n * ldy)), *y = malloc(sizeof(float) * (size_t)(n * ldy));
    CHECK(buf && x && ref && y);
    if (!buf || !x || !ref || !y) goto out;
    for (int64_t i = 0; i < n * ldx; i++)
        x[i] = ((float)(rnd32() % 20001) / 10000.0f - 1.0f) * (i % 13 == 0 ? 30.0f : 1.0f);
    CHECK(kvt_ops_force_variant("scalar") == 0);
    kvt_matmul(NULL, &w, x, ldx, n, ref, ldy);
    static const char *const simd[] = {"avx2", "avx512", "amx"};
    for (size_t v = 0; v < sizeof simd / sizeof simd[0]; v++) {
        if (kvt_ops_force_variant(simd[v]) != 0) continue;
        for (int p = 0; p < 3; p++) {
            for (int64_t i = 0; i < n * ldy; i++) y[i] = NAN;
            kvt_matmul(pools[p], &w, x, ldx, n, y, ldy);
            int bad = 0, gaps = 0;
            for (int64_t t = 0; t < n; t++) {
                bad += memcmp(y + t * ldy, ref + t * ldy, sizeof(float) * (size_t)rows) != 0;
                for (int64_t r = rows; r < ldy; r++) gaps += !isnan(y[t * ldy + r]);
            }
            CHECKF(bad == 0 && gaps == 0,
                   "%s order %s, %lld x %lld, n %lld, %d threads: %d token rows differ, %d gaps written", simd[v],
                   kvt_ops_q8_order(), (long long)rows, (long long)cols, (long long)n, p + 1, bad, gaps);
        }
    }
out:
    free(buf), free(x), free(ref), free(y);
}

int main(void) {
    kvt_pool *pools[3] = {kvt_pool_new(1), kvt_pool_new(2), kvt_pool_new(3)};
    CHECK(pools[0] && pools[1] && pools[2]);
    static const int64_t rows[] = {1, 2, 5, 33}, cols[] = {32, 96, 4096}, ns[] = {7, 8, 9, 16, 17, 250};
    static const char *const orders[] = {"lanes", "block"};
    for (int o = 0; o < 2; o++) {
        CHECK(kvt_ops_set_q8_order(orders[o]) == 0);
        for (size_t ri = 0; ri < sizeof rows / sizeof rows[0]; ri++)
            for (size_t ci = 0; ci < sizeof cols / sizeof cols[0]; ci++)
                for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++)
                    if (ns[ni] < 250 || cols[ci] == 4096) check_shape(pools, rows[ri], cols[ci], ns[ni]);
    }
    printf("variants available: %s%s%s\n", kvt_ops_force_variant("avx2") == 0 ? "avx2 " : "",
           kvt_ops_force_variant("avx512") == 0 ? "avx512 " : "", kvt_ops_force_variant("amx") == 0 ? "amx" : "");
    CHECK(kvt_ops_set_q8_order("lanes") == 0);
    for (int i = 0; i < 3; i++) kvt_pool_free(pools[i]);
    return kvt_test_done("test_q8_tiles");
}
