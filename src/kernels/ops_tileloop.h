// SPDX-License-Identifier: MIT
/* The tiling loop of every SIMD matmul, written once: ops_avx2.c and
 * ops_avx512.c (F32, F16, BF16, Q8_0 weights), ops_q_avx2.c and
 * ops_q_avx512.c (the legacy types) each supply only their micro-kernels,
 * "tiles", and call kvt_tile_loop. A thread's rows are walked rm at a time
 * (rows past r1 repeat the last, their results dropped) against tiles of up
 * to rn tokens, the tokens in chunks whose activations stay in L2. A tile
 * computes out[i * n + j] = dot(row wr[i], token j) for its n <= rn tokens;
 * every tile reduces in the canonical order (ops.h), so the tiling never
 * changes a result. Call it with the tiles as constants (one call per weight
 * type, not a pointer picked at run time): inlined with them, the compiler
 * sees how the token rows are spaced and keeps the accumulators in registers. */
#ifndef KVT_OPS_TILELOOP_H
#define KVT_OPS_TILELOOP_H

#include <stdint.h>
#include <stdlib.h>

#include "ops_impl.h"

#define KVT_TILE_MAX_RM 16
#define KVT_TILE_MAX_RN 8
#define KVT_TILE_CHUNK_BYTES (1 << 20) /* activation bytes per token chunk (half a 2 MiB L2) */
#define KVT_TILE_QBLOCK 32             /* Q8 activation block: xd and xs hold one value per block */
#define KVT_TILE_ALIGN 64              /* widened rows: one cache line, one zmm */

/* The activations of a tile's tokens (kvt_acts rows): xf for float weights;
 * xq, xd and xs (NULL unless Q8_1 sums exist) for quantized ones. */
typedef struct {
    const float *xf[KVT_TILE_MAX_RN];
    const uint8_t *xq[KVT_TILE_MAX_RN];
    const float *xd[KVT_TILE_MAX_RN], *xs[KVT_TILE_MAX_RN];
} kvt_tile_x;

/* The body of a tile: CALL(N) with N the tile's token count `n` as a
 * constant (1, 1 to 2, 3 or 6), so that each count gets a fully unrolled
 * instance with its accumulators in registers. */
#define KVT_TILE_BY_N1(CALL) \
    (void)n; \
    CALL(1);
#define KVT_TILE_BY_N2(CALL) \
    switch (n) { \
    case 1: CALL(1); break; \
    default: CALL(2); break; \
    }
#define KVT_TILE_BY_N3(CALL) \
    switch (n) { \
    case 1: CALL(1); break; \
    case 2: CALL(2); break; \
    default: CALL(3); break; \
    }
#define KVT_TILE_BY_N4(CALL) \
    switch (n) { \
    case 1: CALL(1); break; \
    case 2: CALL(2); break; \
    case 3: CALL(3); break; \
    default: CALL(4); break; \
    }
#define KVT_TILE_BY_N6(CALL) \
    switch (n) { \
    case 1: CALL(1); break; \
    case 2: CALL(2); break; \
    case 3: CALL(3); break; \
    case 4: CALL(4); break; \
    case 5: CALL(5); break; \
    default: CALL(6); break; \
    }

typedef void (*kvt_tile_fn)(const uint8_t *const *wr, const kvt_tile_x *x, int n, int64_t k, float *out);
/* Writes the k weights of a row as f32 into dst (kvt_acts.kpad floats, 64-byte aligned). */
typedef void (*kvt_widen_fn)(const uint8_t *row, int64_t k, float *dst);

typedef struct {
    int rm, rn; /* tile: rows x tokens, at most KVT_TILE_MAX_RM x KVT_TILE_MAX_RN */
    int q8;     /* activations: quantized (xq, xd, xs), else floats (xf) */
    kvt_tile_fn tile;
    /* Optional (NULL): with more than rn tokens, each group of rm rows is
     * widened to f32 once (exact) and tile_f32 runs on the copies, so the inner
     * loop spends no port on conversions. Without the buffer (allocation
     * failed) `tile` runs instead: the same bits, just slower. */
    kvt_widen_fn widen;
    kvt_tile_fn tile_f32;
} kvt_tiling;

static inline __attribute__((always_inline)) void kvt_tile_loop(const kvt_wmat *w, const kvt_acts *a, int64_t r0,
                                                                int64_t r1, float *y, int64_t ldy, kvt_tiling tl) {
    const uint8_t *base = w->data;
    const int64_t nbp = a->kpad / KVT_TILE_QBLOCK;
    const size_t tok_bytes = (size_t)a->kpad * (tl.q8 ? sizeof(uint8_t) : sizeof(float));
    int64_t chunk = (int64_t)(KVT_TILE_CHUNK_BYTES / tok_bytes) / tl.rn * tl.rn;
    if (chunk < tl.rn) chunk = tl.rn;
    float *wbuf = tl.widen && a->n > tl.rn
        ? aligned_alloc(KVT_TILE_ALIGN, sizeof(float) * (size_t)tl.rm * (size_t)a->kpad)
        : NULL;
    float out[KVT_TILE_MAX_RM * KVT_TILE_MAX_RN];
    kvt_tile_x x;
    for (int64_t c0 = 0; c0 < a->n; c0 += chunk) {
        const int64_t c1 = c0 + chunk < a->n ? c0 + chunk : a->n;
        for (int64_t r = r0; r < r1; r += tl.rm) {
            const uint8_t *wr[KVT_TILE_MAX_RM];
            for (int i = 0; i < tl.rm; i++) {
                wr[i] = base + (size_t)(r + i < r1 ? r + i : r1 - 1) * w->row_bytes;
                if (wbuf) {
                    tl.widen(wr[i], a->k, wbuf + (size_t)i * (size_t)a->kpad);
                    wr[i] = (const uint8_t *)(wbuf + (size_t)i * (size_t)a->kpad);
                }
            }
            for (int64_t t = c0; t < c1; t += tl.rn) {
                const int n = c1 - t < tl.rn ? (int)(c1 - t) : tl.rn;
                for (int j = 0; j < n; j++) {
                    if (tl.q8) {
                        x.xq[j] = a->xq + (t + j) * a->kpad;
                        x.xd[j] = a->xd + (t + j) * nbp;
                        x.xs[j] = a->xs ? a->xs + (t + j) * nbp : NULL;
                    } else {
                        x.xf[j] = a->xf + (t + j) * a->kpad;
                    }
                }
                if (wbuf) /* two direct calls, not a chosen pointer: each can be inlined */
                    tl.tile_f32(wr, &x, n, a->k, out);
                else tl.tile(wr, &x, n, a->k, out);
                for (int i = 0; i < tl.rm && r + i < r1; i++)
                    for (int j = 0; j < n; j++) y[(t + j) * ldy + r + i] = out[i * n + j];
            }
        }
    }
    free(wbuf);
}

/* The matmul_rows (ops_impl.h) NAME of a variant, for F32, F16, BF16 and
 * Q8_0 weights: its tiles ft_f32, ft_f16, ft_bf16 (RM x RN) and Q8
 * (Q8_RM x Q8_RN), each loop with its tile as a constant. WIDEN_F16/WIDEN_BF16:
 * kvt_widen_fn or NULL (then F16/BF16 rows are converted inside the tile).
 * Q8_DEC: a Q8_0 tile of Q8_DEC_RM x Q8_DEC_RN that runs instead of Q8
 * for at most Q8_DEC_RN tokens (decode: the same bits, tuned for streaming
 * every weight once); Q8_DEC_RN 0 for none. */
#define KVT_DEFINE_MM_ROWS(NAME, ATTR, WIDEN_F16, WIDEN_BF16, Q8, Q8_RM, Q8_RN, Q8_DEC, Q8_DEC_RM, Q8_DEC_RN) \
    static ATTR void NAME(const kvt_wmat *w, const kvt_acts *a, int64_t r0, int64_t r1, float *y, int64_t ldy) { \
        switch (w->type) { \
        case KVT_TYPE_Q8_0: \
            if (Q8_DEC_RN > 0 && a->n <= Q8_DEC_RN) \
                kvt_tile_loop(w, a, r0, r1, y, ldy, \
                              (kvt_tiling){.rm = Q8_DEC_RM, .rn = Q8_DEC_RN, .q8 = 1, .tile = Q8_DEC}); \
            else kvt_tile_loop(w, a, r0, r1, y, ldy, (kvt_tiling){.rm = Q8_RM, .rn = Q8_RN, .q8 = 1, .tile = Q8}); \
            break; \
        case KVT_TYPE_F16: \
            kvt_tile_loop(w, a, r0, r1, y, ldy, \
                          (kvt_tiling){.rm = RM, .rn = RN, .tile = ft_f16, .widen = WIDEN_F16, .tile_f32 = ft_f32}); \
            break; \
        case KVT_TYPE_BF16: \
            kvt_tile_loop(w, a, r0, r1, y, ldy, \
                          (kvt_tiling){.rm = RM, .rn = RN, .tile = ft_bf16, .widen = WIDEN_BF16, .tile_f32 = ft_f32}); \
            break; \
        default: kvt_tile_loop(w, a, r0, r1, y, ldy, (kvt_tiling){.rm = RM, .rn = RN, .tile = ft_f32}); break; \
        } \
    }

/* The legacy-type matmul ENTRY (a matmul_ql_rows, ops_impl.h) of a variant,
 * from its always-inlined tile(layout, wr, xq, xd, xs, rm, rn, k, out) with
 * its QRM x QRN tiling and tile_dec(layout, wr, xq, xd, xs, rn, k, out) of
 * DEC_RM rows x up to DEC_RN (1 or 2) tokens, which runs instead for at most
 * DEC_RN tokens (the same bits, tuned for streaming every weight once). One
 * tile function of each per type (Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, kvt_ql_index
 * order), the layout's fields folded in as constants. ATTR is the variant's
 * target attribute, BY_N the KVT_TILE_BY_N* that matches QRN. The includer
 * includes quant_legacy.h. */
#define KVT_QL_TILE_FN(NAME, ATTR, BY_N, CALL, LAYOUT) \
    static ATTR void NAME(const uint8_t *const *wr, const kvt_tile_x *x, int n, int64_t k, float *out) { \
        const kvt_ql_layout f = LAYOUT; \
        BY_N(CALL) \
    }
#define KVT_QL_CALL(N) tile(f, wr, x->xq, x->xd, x->xs, QRM, N, k, out)
#define KVT_QL_DEC_CALL(N) tile_dec(f, wr, x->xq, x->xd, x->xs, N, k, out)
#define KVT_QL_TILE_FNS(PREFIX, ATTR, BY_N, CALL) \
    KVT_QL_TILE_FN(PREFIX##_q4_0, ATTR, BY_N, CALL, KVT_QL_LAYOUT_Q4_0) \
    KVT_QL_TILE_FN(PREFIX##_q4_1, ATTR, BY_N, CALL, KVT_QL_LAYOUT_Q4_1) \
    KVT_QL_TILE_FN(PREFIX##_q5_0, ATTR, BY_N, CALL, KVT_QL_LAYOUT_Q5_0) \
    KVT_QL_TILE_FN(PREFIX##_q5_1, ATTR, BY_N, CALL, KVT_QL_LAYOUT_Q5_1) \
    KVT_QL_TILE_FN(PREFIX##_iq4_nl, ATTR, BY_N, CALL, KVT_QL_LAYOUT_IQ4_NL)
#define KVT_QL_TILES(PREFIX) \
    { PREFIX##_q4_0, PREFIX##_q4_1, PREFIX##_q5_0, PREFIX##_q5_1, PREFIX##_iq4_nl }
#define KVT_QL_DEFINE_MM_DEC(ENTRY, ATTR, BY_N, DEC_RM, DEC_RN) \
    KVT_QL_TILE_FNS(ENTRY, ATTR, BY_N, KVT_QL_CALL) \
    KVT_QL_TILE_FNS(ENTRY##_dec, ATTR, KVT_TILE_BY_N##DEC_RN, KVT_QL_DEC_CALL) \
    void ENTRY(const kvt_wmat *w, const kvt_acts *a, int64_t r0, int64_t r1, float *y, int64_t ldy) { \
        static const kvt_tile_fn tiles[] = KVT_QL_TILES(ENTRY), dec[] = KVT_QL_TILES(ENTRY##_dec); \
        const int t = kvt_ql_index(w->type); \
        if (a->n <= DEC_RN) \
            kvt_tile_loop(w, a, r0, r1, y, ldy, (kvt_tiling){.rm = DEC_RM, .rn = DEC_RN, .q8 = 1, .tile = dec[t]}); \
        else kvt_tile_loop(w, a, r0, r1, y, ldy, (kvt_tiling){.rm = QRM, .rn = QRN, .q8 = 1, .tile = tiles[t]}); \
    }

#endif
