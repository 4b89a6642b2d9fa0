// SPDX-License-Identifier: MIT
/* Q8_0 prefill on AMX-INT8 tiles, with the bits of ops.h's "block" Q8_0
 * order (the "lanes" order cannot use whole-block tile products; it stays on
 * the AVX-512 kernel).
 *
 * That order needs, per output and block, the exact integer dot of the
 * block's 32 weights and 32 activation quants, then one fused multiply-add
 * into the output's accumulator, blocks in order. One tile product with
 * K = 32 bytes is exactly those integers for 16 rows x 16 tokens: A is the
 * 16 rows' quants of block b, read in place from the weights (stride
 * row_bytes), B the 16 tokens' quants in VNNI order (dword d of token n at
 * B[d][n]), rearranged once per chunk of tokens (as s8: the activation bias
 * comes off as a sign flip). The 16 x 16 integers are stored and converted,
 * and each row's accumulator (one zmm of 16 tokens, in a register through
 * all the blocks) takes fma(isum, d_w * d_x, acc). Four blocks' products run
 * while the previous four go through the fused multiply-adds, so a load
 * never waits on the tile store before it. Rows 16 at a time; a tail of
 * fewer rows, decode and an allocation failure are left to the AVX-512
 * kernel, which gives the same bits. */
#include <immintrin.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ops_amx.h"
#include "ops_impl.h"

#define Q8A_M 16                    /* weight rows per tile */
#define Q8A_N KVT_AMX_N             /* tokens per tile (one zmm of int32 or f32) */
#define Q8A_DW (KVT_Q8_0_BLOCK / 4) /* dwords of one token's block: B's rows */
#define Q8A_CHUNK_BYTES (1 << 20)   /* rearranged activation bytes per chunk of tokens (half a 2 MiB L2) */
#define Q8A_MIN_TOKENS 3            /* fewer tokens: the AVX-512 tile streams the weights better */
#define Q8A_INFLIGHT 4              /* blocks whose products are in flight */
/* Tile registers, as literal numbers (the intrinsics paste them into the
 * assembly): 0-3 the integers of four blocks, 4-5 their weights and 6-7
 * their activations (alternating). */
#define TILE_A0 4
#define TILE_A1 5
#define TILE_B0 6
#define TILE_B1 7

/* One token tile's activations of one block: bt[d][n] = token n's dword d
 * (its quants 4d..4d+3 as s8), and the block scales dx[n]. */
typedef struct {
    _Alignas(64) int32_t bt[Q8A_DW][Q8A_N];
    _Alignas(64) float dx[Q8A_N];
} q8a_acts;

typedef int32_t q8a_sums[Q8A_INFLIGHT][Q8A_M][Q8A_N];

/* Rearranges tokens [t0, t0 + nt) (nt <= Q8A_N; the rest zero) of block b. */
static T_AMX void q8a_pack(const kvt_acts *a, int64_t t0, int nt, int64_t b, q8a_acts *o) {
    const int64_t nbp = a->kpad / KVT_Q8_0_BLOCK;
    /* q + 128 as u8, xor 128: q as s8 */
    kvt_amx_gather_tokens(a->xq + t0 * a->kpad + b * KVT_Q8_0_BLOCK, a->kpad, nt, Q8A_DW, KVT_Q8_ACT_BIAS, o->bt);
    for (int n = 0; n < Q8A_N; n++) o->dx[n] = n < nt ? a->xd[(t0 + n) * nbp + b] : 0.0f;
}

/* The rows' f16 block scales as f32: dw[b][i] for the 16 rows from w0. */
static T_AMX void q8a_scales(const uint8_t *w0, size_t rb, int64_t nb, float (*dw)[Q8A_M]) {
    for (int64_t b = 0; b < nb; b++)
        for (int i = 0; i < Q8A_M; i++) dw[b][i] = _cvtsh_ss(kvt_load_u16(w0 + (size_t)i * rb + b * KVT_Q8_0_BYTES));
}

/* Block b's integers into tile C: weights from wq (row stride rb), activations x. */
#define Q8A_DOT(C, A, B, wq, rb, x) \
    do { \
        _tile_zero(C); \
        _tile_loadd(A, wq, rb); \
        _tile_loadd(B, (x)->bt, Q8A_N * 4); \
        _tile_dpbssd(C, A, B); \
    } while (0)

/* The integers of blocks b0 .. b0 + n - 1 (n <= 4) into sums[0 .. n). */
static inline __attribute__((always_inline)) T_AMX void q8a_issue(const uint8_t *wq, size_t rb, const q8a_acts *x,
                                                                  int64_t b0, int64_t n, q8a_sums sums) {
    wq += b0 * KVT_Q8_0_BYTES;
    x += b0;
    if (n == Q8A_INFLIGHT) {
        Q8A_DOT(0, TILE_A0, TILE_B0, wq, rb, x);
        Q8A_DOT(1, TILE_A1, TILE_B1, wq + KVT_Q8_0_BYTES, rb, x + 1);
        Q8A_DOT(2, TILE_A0, TILE_B0, wq + 2 * KVT_Q8_0_BYTES, rb, x + 2);
        Q8A_DOT(3, TILE_A1, TILE_B1, wq + 3 * KVT_Q8_0_BYTES, rb, x + 3);
        _tile_stored(0, sums[0], Q8A_N * 4);
        _tile_stored(1, sums[1], Q8A_N * 4);
        _tile_stored(2, sums[2], Q8A_N * 4);
        _tile_stored(3, sums[3], Q8A_N * 4);
        return;
    }
    for (int64_t e = 0; e < n; e++) {
        Q8A_DOT(0, TILE_A0, TILE_B0, wq + e * KVT_Q8_0_BYTES, rb, x + e);
        _tile_stored(0, sums[e], Q8A_N * 4);
    }
}

/* 16 rows (quants of the first at wq) x one token tile through all nb
 * blocks: out[i][n]. buf: two q8a_sums. */
static T_AMX void q8a_tile(const uint8_t *wq, size_t rb, const q8a_acts *x, const float (*dw)[Q8A_M], int64_t nb,
                           q8a_sums *buf, float out[Q8A_M][Q8A_N]) {
    __m512 acc[Q8A_M];
    for (int i = 0; i < Q8A_M; i++) acc[i] = _mm512_setzero_ps();
    const int64_t groups = (nb + Q8A_INFLIGHT - 1) / Q8A_INFLIGHT;
    q8a_issue(wq, rb, x, 0, nb < Q8A_INFLIGHT ? nb : Q8A_INFLIGHT, buf[0]);
    for (int64_t g = 0; g < groups; g++) {
        const int64_t b0 = g * Q8A_INFLIGHT, n = nb - b0 < Q8A_INFLIGHT ? nb - b0 : Q8A_INFLIGHT;
        if (g + 1 < groups) {
            const int64_t b1 = b0 + Q8A_INFLIGHT;
            q8a_issue(wq, rb, x, b1, nb - b1 < Q8A_INFLIGHT ? nb - b1 : Q8A_INFLIGHT, buf[(g + 1) & 1]);
        }
        int32_t(*cur)[Q8A_M][Q8A_N] = buf[g & 1];
        for (int64_t e = 0; e < n; e++) {
            const __m512 dx = _mm512_load_ps(x[b0 + e].dx);
            _Pragma("GCC unroll 16") for (int i = 0; i < Q8A_M; i++)
                acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(cur[e][i])),
                                         _mm512_mul_ps(_mm512_set1_ps(dw[b0 + e][i]), dx), acc[i]);
        }
    }
    for (int i = 0; i < Q8A_M; i++) _mm512_store_ps(out[i], acc[i]);
}

/* Long: the whole tile matmul (tile setup, the chunk, row and token tile loops, write-back). */
T_AMX int64_t kvt_q8_mm_amx(const kvt_wmat *w, const kvt_acts *a, int64_t r0, int64_t r1, float *y, int64_t ldy) {
    const int64_t rows = (r1 - r0) / Q8A_M * Q8A_M, nb = a->k / KVT_Q8_0_BLOCK;
    if (w->type != KVT_TYPE_Q8_0 || !kvt_ops_q8_block() || a->n < Q8A_MIN_TOKENS || rows == 0 || nb == 0) return 0;
    const int64_t chunk = kvt_amx_chunk_tokens(Q8A_CHUNK_BYTES, sizeof(q8a_acts) * (size_t)nb, a->n);
    const int64_t subs_max = chunk / Q8A_N;
    q8a_acts *xs = aligned_alloc(64, sizeof(q8a_acts) * (size_t)(subs_max * nb));
    float(*dw)[Q8A_M] = aligned_alloc(64, sizeof(float) * Q8A_M * (size_t)nb);
    q8a_sums *buf = aligned_alloc(64, sizeof(q8a_sums) * 2);
    if (!xs || !dw || !buf) {
        free(xs), free(dw), free(buf);
        return 0;
    }
    kvt_amx_cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < Q8A_INFLIGHT; t++) cfg.rows[t] = Q8A_M, cfg.colsb[t] = Q8A_N * 4;
    for (int t = 0; t < 2; t++) {
        cfg.rows[TILE_A0 + t] = Q8A_M, cfg.colsb[TILE_A0 + t] = KVT_Q8_0_BLOCK;
        cfg.rows[TILE_B0 + t] = Q8A_DW, cfg.colsb[TILE_B0 + t] = Q8A_N * 4;
    }
    _tile_loadconfig(&cfg);
    const size_t rb = w->row_bytes;
    for (int64_t c0 = 0; c0 < a->n; c0 += chunk) {
        const int64_t nt = a->n - c0 < chunk ? a->n - c0 : chunk;
        const int64_t subs = (nt + Q8A_N - 1) / Q8A_N;
        for (int64_t s = 0; s < subs; s++) {
            const int64_t t0 = c0 + s * Q8A_N;
            const int tn = (int)(c0 + nt - t0 < Q8A_N ? c0 + nt - t0 : Q8A_N);
            for (int64_t b = 0; b < nb; b++) q8a_pack(a, t0, tn, b, &xs[s * nb + b]);
        }
        for (int64_t r = r0; r < r0 + rows; r += Q8A_M) {
            const uint8_t *w0 = (const uint8_t *)w->data + (size_t)r * rb;
            q8a_scales(w0, rb, nb, dw);
            for (int64_t s = 0; s < subs; s++) {
                _Alignas(64) float out[Q8A_M][Q8A_N];
                q8a_tile(w0 + KVT_Q8_0_SCALE_BYTES, rb, &xs[s * nb], (const float(*)[Q8A_M])dw, nb, buf, out);
                const int64_t t0 = c0 + s * Q8A_N;
                kvt_amx_store_transposed((const float(*)[KVT_AMX_N])out,
                                         (int)(c0 + nt - t0 < Q8A_N ? c0 + nt - t0 : Q8A_N), Q8A_M, y + t0 * ldy + r,
                                         ldy);
            }
        }
    }
    _tile_release();
    free(xs), free(dw), free(buf);
    return rows;
}
