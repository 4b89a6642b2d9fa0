// SPDX-License-Identifier: MIT
/* Q8_0 prefill in the "lanes" order (ops.h) on AVX-512 VNNI, 16 tokens per
 * vector: the bits of tile_q8l (ops_avx512.c) with a quarter fewer vector
 * operations.
 *
 * The order needs, per output, block and lane, the exact integer sum of 4
 * products, converted and fused into that lane's accumulator with
 * d = d_w * d_x. tile_q8l puts two rows' 8 lanes in one zmm, so every
 * (row pair, token, block) pays a multiply for d besides the dot, convert and
 * fma. Here one zmm holds one lane of one row for 16 tokens: the dot takes
 * the row's 4 weights of that lane as a broadcast from the weights in place
 * and the 16 tokens' 4 activation bytes of the lane (rearranged once per
 * chunk of tokens), so d (one row scale times 16 token scales) is one
 * multiply shared by the 8 lanes. Two rows x 8 lanes make 16 accumulators
 * plus the 8 lane vectors of a block.
 *
 * The activations are u8 (q + 128), the weights s8; each lane's dot starts
 * at -128 * the sum of its 4 weights, so it ends at the exact integer. Those
 * starts and the rows' f32 scales are worked out once per row pair. */
#include <immintrin.h>
#include <stdint.h>
#include <stdlib.h>

#include "ops_amx.h"
#include "ops_impl.h"

#define T512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,fma,f16c")))

#define Q8T_N KVT_AMX_N           /* tokens per vector (the AMX kernels' token staging) */
#define Q8T_R 2                   /* weight rows per tile */
#define Q8T_CHUNK_BYTES (1 << 20) /* rearranged activation bytes per chunk of tokens (half a 2 MiB L2) */
#define Q8T_MIN_TOKENS 16         /* fewer tokens: ops_avx512.c's decode tiles waste less */
#define Q8T_PF_AHEAD 4            /* blocks ahead whose activations are prefetched (they come from L2) */

/* One token vector's activations of one block: x[l][n] = token n's quants
 * 4l..4l+3 (u8, as stored), and the block scales dx[n]. */
typedef struct {
    _Alignas(64) int32_t x[KVT_Q8_LANES][Q8T_N];
    _Alignas(64) float dx[Q8T_N];
} q8t_acts;

/* One row's block: the lanes' dot starts and the f32 scale. */
typedef struct {
    _Alignas(32) int32_t start[KVT_Q8_LANES];
    float dw;
} q8t_row_block;

/* Rearranges tokens [t0, t0 + nt) (nt <= 16; the rest zero) of block b. */
static T512 void q8t_pack(const kvt_acts *a, int64_t t0, int nt, int64_t b, q8t_acts *o) {
    const int64_t nbp = a->kpad / KVT_Q8_0_BLOCK;
    kvt_amx_gather_tokens(a->xq + t0 * a->kpad + b * KVT_Q8_0_BLOCK, a->kpad, nt, KVT_Q8_LANES, 0, o->x);
    for (int n = 0; n < Q8T_N; n++) o->dx[n] = n < nt ? a->xd[(t0 + n) * nbp + b] : 0.0f;
}

/* A row's dot starts and scales for its nb blocks. */
static T512 void q8t_row(const uint8_t *row, int64_t nb, q8t_row_block *o) {
    const __m256i bias = _mm256_set1_epi8((char)KVT_Q8_ACT_BIAS);
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk = row + b * KVT_Q8_0_BYTES;
        const __m256i wq = _mm256_loadu_si256((const __m256i *)(const void *)(blk + KVT_Q8_0_SCALE_BYTES));
        const __m256i s = _mm256_dpbusd_epi32(_mm256_setzero_si256(), bias, wq);
        _mm256_store_si256((__m256i *)(void *)o[b].start, _mm256_sub_epi32(_mm256_setzero_si256(), s));
        o[b].dw = _cvtsh_ss(kvt_load_u16(blk));
    }
}

/* Rows w0 + i * rb, i < Q8T_R (their blocks' starts and scales in rs[i]) x
 * one token vector through all nb blocks: out[i] holds row i's 16 outputs. */
static T512 void q8t_tile(const uint8_t *w0, size_t rb, const q8t_row_block *const rs[Q8T_R], const q8t_acts *x,
                          int64_t nb, __m512 out[Q8T_R]) {
    __m512 acc[Q8T_R][KVT_Q8_LANES];
    _Pragma("GCC unroll 8") for (int i = 0; i < Q8T_R; i++)
        _Pragma("GCC unroll 8") for (int l = 0; l < KVT_Q8_LANES; l++) acc[i][l] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const __m512 dx = _mm512_load_ps(x[b].dx);
        /* past the last block this points beyond the staging, which a prefetch may */
        const char *pf = (const char *)(const void *)(x + b + Q8T_PF_AHEAD);
        _Pragma("GCC unroll 9") for (int c = 0; c < (int)(sizeof(q8t_acts) / 64); c++)
            _mm_prefetch(pf + 64 * c, _MM_HINT_T0);
        const uint8_t *wq[Q8T_R];
        __m512 d[Q8T_R];
        _Pragma("GCC unroll 8") for (int i = 0; i < Q8T_R; i++) {
            wq[i] = w0 + (size_t)i * rb + b * KVT_Q8_0_BYTES + KVT_Q8_0_SCALE_BYTES;
            d[i] = _mm512_mul_ps(_mm512_set1_ps(rs[i][b].dw), dx);
        }
        /* each lane's 16 tokens loaded once for the rows */
        _Pragma("GCC unroll 8") for (int l = 0; l < KVT_Q8_LANES; l++) {
            const __m512i xl = _mm512_load_si512(x[b].x[l]);
            _Pragma("GCC unroll 8") for (int i = 0; i < Q8T_R; i++) {
                const __m512i wl = _mm512_set1_epi32((int32_t)kvt_load_u32(wq[i] + KVT_Q8_GROUP * l));
                const __m512i s = _mm512_dpbusd_epi32(_mm512_set1_epi32(rs[i][b].start[l]), xl, wl);
                acc[i][l] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), d[i], acc[i][l]);
            }
        }
    }
    /* ops.h's lane tree: (l0 + l4) + (l2 + l6), plus (l1 + l5) + (l3 + l7) */
    _Pragma("GCC unroll 8") for (int i = 0; i < Q8T_R; i++) {
        const __m512 s0 = _mm512_add_ps(acc[i][0], acc[i][4]), s1 = _mm512_add_ps(acc[i][1], acc[i][5]);
        const __m512 s2 = _mm512_add_ps(acc[i][2], acc[i][6]), s3 = _mm512_add_ps(acc[i][3], acc[i][7]);
        out[i] = _mm512_add_ps(_mm512_add_ps(s0, s2), _mm512_add_ps(s1, s3));
    }
}

/* Long: the whole matmul (staging, the chunk, row-pair and token-vector loops, write-back). */
T512 int64_t kvt_q8l_mm_avx512(const kvt_wmat *w, const kvt_acts *a, int64_t r0, int64_t r1, float *y, int64_t ldy) {
    const int64_t rows = (r1 - r0) / Q8T_R * Q8T_R, nb = a->k / KVT_Q8_0_BLOCK;
    if (w->type != KVT_TYPE_Q8_0 || kvt_ops_q8_block() || a->n < Q8T_MIN_TOKENS || rows == 0 || nb == 0) return 0;
    const int64_t chunk = kvt_amx_chunk_tokens(Q8T_CHUNK_BYTES, sizeof(q8t_acts) * (size_t)nb, a->n);
    const int64_t vecs_max = chunk / Q8T_N;
    q8t_acts *xs = aligned_alloc(64, sizeof(q8t_acts) * (size_t)(vecs_max * nb));
    q8t_row_block *rs = aligned_alloc(64, sizeof(q8t_row_block) * (size_t)(Q8T_R * nb));
    if (!xs || !rs) {
        free(xs), free(rs);
        return 0;
    }
    const size_t rb = w->row_bytes;
    const q8t_row_block *rsp[Q8T_R];
    for (int i = 0; i < Q8T_R; i++) rsp[i] = rs + i * nb;
    for (int64_t c0 = 0; c0 < a->n; c0 += chunk) {
        const int64_t nt = a->n - c0 < chunk ? a->n - c0 : chunk;
        const int64_t vecs = (nt + Q8T_N - 1) / Q8T_N;
        for (int64_t s = 0; s < vecs; s++) {
            const int64_t t0 = c0 + s * Q8T_N;
            const int tn = (int)(c0 + nt - t0 < Q8T_N ? c0 + nt - t0 : Q8T_N);
            for (int64_t b = 0; b < nb; b++) q8t_pack(a, t0, tn, b, &xs[s * nb + b]);
        }
        for (int64_t r = r0; r < r0 + rows; r += Q8T_R) {
            const uint8_t *w0 = (const uint8_t *)w->data + (size_t)r * rb;
            for (int i = 0; i < Q8T_R; i++) q8t_row(w0 + (size_t)i * rb, nb, rs + i * nb);
            for (int64_t s = 0; s < vecs; s++) {
                __m512 out[Q8T_R];
                q8t_tile(w0, rb, rsp, &xs[s * nb], nb, out);
                const int64_t t0 = c0 + s * Q8T_N;
                const int tn = (int)(c0 + nt - t0 < Q8T_N ? c0 + nt - t0 : Q8T_N);
                _Alignas(64) float o[Q8T_R][Q8T_N];
                for (int i = 0; i < Q8T_R; i++) _mm512_store_ps(o[i], out[i]);
                for (int n = 0; n < tn; n++)
                    for (int i = 0; i < Q8T_R; i++) y[(t0 + n) * ldy + r + i] = o[i][n];
            }
        }
    }
    free(xs), free(rs);
    return rows;
}
