/* The tiling loop shared by the SIMD matmuls of quantized weights with Q8
 * activations (ops_q_avx2.c, ops_q_avx512.c): a thread's rows are walked rm at
 * a time (rows past r1 repeat the last, their results dropped) against tiles
 * of up to rn tokens, and the tokens in chunks whose activations stay in L2.
 * The tile kernel computes out[i * n + j] = dot(row wr[i], token j) for the
 * n <= rn tokens given; every kernel reduces in the canonical order, so the
 * tiling never changes a result. */
#ifndef KVT_OPS_QLOOP_H
#define KVT_OPS_QLOOP_H

#include <stdint.h>

#include "ops_impl.h"

#define KVT_QLOOP_MAX_RM 4
#define KVT_QLOOP_MAX_RN 8
#define KVT_QLOOP_CHUNK_BYTES (1 << 20) /* activation bytes per token chunk (half a 2 MiB L2) */
#define KVT_QLOOP_BLOCK 32              /* activation block: xd and xs hold one value per block */

typedef void (*kvt_qtile_fn)(const uint8_t *const *wr, const uint8_t *const *xq, const float *const *xd,
                             const float *const *xs, int n, int64_t k, float *out);

static inline __attribute__((always_inline)) void kvt_qloop(const kvt_wmat *w, const kvt_acts *a, int64_t r0,
                                                            int64_t r1, float *y, int64_t ldy, int rm, int rn,
                                                            kvt_qtile_fn tile) {
    const uint8_t *base = w->data;
    const int64_t nbp = a->kpad / KVT_QLOOP_BLOCK;
    int64_t chunk = (int64_t)(KVT_QLOOP_CHUNK_BYTES / (size_t)a->kpad) / rn * rn;
    if (chunk < rn) chunk = rn;
    float out[KVT_QLOOP_MAX_RM * KVT_QLOOP_MAX_RN];
    for (int64_t c0 = 0; c0 < a->n; c0 += chunk) {
        const int64_t c1 = c0 + chunk < a->n ? c0 + chunk : a->n;
        for (int64_t r = r0; r < r1; r += rm) {
            const uint8_t *wr[KVT_QLOOP_MAX_RM];
            for (int i = 0; i < rm; i++) wr[i] = base + (size_t)(r + i < r1 ? r + i : r1 - 1) * w->row_bytes;
            for (int64_t t = c0; t < c1; t += rn) {
                const int n = c1 - t < rn ? (int)(c1 - t) : rn;
                const uint8_t *xq[KVT_QLOOP_MAX_RN];
                const float *xd[KVT_QLOOP_MAX_RN], *xs[KVT_QLOOP_MAX_RN];
                for (int j = 0; j < n; j++) {
                    xq[j] = a->xq + (t + j) * a->kpad;
                    xd[j] = a->xd + (t + j) * nbp;
                    xs[j] = a->xs ? a->xs + (t + j) * nbp : NULL;
                }
                tile(wr, xq, xd, xs, n, a->k, out);
                for (int i = 0; i < rm && r + i < r1; i++)
                    for (int j = 0; j < n; j++) y[(t + j) * ldy + r + i] = out[i * n + j];
            }
        }
    }
}

#endif
