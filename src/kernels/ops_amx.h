// SPDX-License-Identifier: MIT
/* What the AMX kernels (ops_k_x86.c, ops_q8_amx.c) share: their target
 * attribute and the tile configuration a matmul loads for its duration; and,
 * with the AVX-512 lanes-order Q8_0 kernel (ops_q8l_avx512.c), the token
 * staging: 16 tokens' dwords side by side, a chunk of tokens at a time. */
#ifndef KVT_OPS_AMX_H
#define KVT_OPS_AMX_H

#include <immintrin.h>
#include <stdint.h>

#define T_AMX __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,fma,f16c,amx-tile,amx-int8")))
/* The staging helpers need AVX-512 alone, so AVX-512 kernels inline them too. */
#define T_STAGE __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq")))

/* The 64-byte operand of ldtilecfg (palette 1): bytes per row and rows of
 * each of the 8 tile registers. */
typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} kvt_amx_cfg;

#define KVT_AMX_N 16 /* tokens per tile: B's dwords per row, one zmm */

/* Tokens per staging chunk, a multiple of KVT_AMX_N near `bytes` of staging
 * at `per_vec` bytes per KVT_AMX_N tokens, at least KVT_AMX_N, at most n
 * rounded up to KVT_AMX_N. */
static inline int64_t kvt_amx_chunk_tokens(size_t bytes, size_t per_vec, int64_t n) {
    int64_t chunk = (int64_t)(bytes / per_vec) * KVT_AMX_N;
    if (chunk < KVT_AMX_N) chunk = KVT_AMX_N;
    if (chunk > n) chunk = (n + KVT_AMX_N - 1) / KVT_AMX_N * KVT_AMX_N;
    return chunk;
}

/* B tiles' layout for nt <= 16 tokens: bt[d][n] = dword d of token n's row at
 * q0 + n * stride (d < ndw; tokens past nt 0), each byte xor flip. */
static inline __attribute__((always_inline)) T_STAGE void kvt_amx_gather_tokens(const void *q0, int64_t stride, int nt,
                                                                                int ndw, uint8_t flip,
                                                                                int32_t (*bt)[KVT_AMX_N]) {
    const __mmask16 m = (__mmask16)((1u << nt) - 1);
    const __m512i tok = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                           _mm512_set1_epi32((int)stride));
    const __m512i x = _mm512_set1_epi8((char)flip);
    for (int d = 0; d < ndw; d++) {
        const __m512i v = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), m, tok, (const char *)q0 + 4 * d, 1);
        _mm512_store_si512(bt[d], _mm512_maskz_xor_epi32(m, v, x));
    }
}

/* Writes a tile of results, acc[i][n] for row i and token n (16 x 16), to
 * y[n * ldy + i] for the first nn tokens and nr rows: transposed in registers
 * (pairs, then 4 x 4 blocks within 128-bit lanes, then the lanes), so each
 * token's rows go out as one store. */
static inline __attribute__((always_inline)) T_AMX void kvt_amx_store_transposed(const float (*acc)[KVT_AMX_N], int nn,
                                                                                 int nr, float *y, int64_t ldy) {
    __m512 r[16], t[16];
    for (int i = 0; i < 16; i++) r[i] = _mm512_load_ps(acc[i]);
    for (int k = 0; k < 8; k++) {
        t[2 * k] = _mm512_unpacklo_ps(r[2 * k], r[2 * k + 1]);
        t[2 * k + 1] = _mm512_unpackhi_ps(r[2 * k], r[2 * k + 1]);
    }
    /* r[4k + c], 128-bit lane L: token 4L + c of rows 4k .. 4k + 3 */
    for (int k = 0; k < 4; k++) {
        r[4 * k] = _mm512_shuffle_ps(t[4 * k], t[4 * k + 2], 0x44);
        r[4 * k + 1] = _mm512_shuffle_ps(t[4 * k], t[4 * k + 2], 0xEE);
        r[4 * k + 2] = _mm512_shuffle_ps(t[4 * k + 1], t[4 * k + 3], 0x44);
        r[4 * k + 3] = _mm512_shuffle_ps(t[4 * k + 1], t[4 * k + 3], 0xEE);
    }
    const __mmask16 m = (__mmask16)((1u << nr) - 1);
    for (int c = 0; c < 4; c++) {
        const __m512 b0 = _mm512_shuffle_f32x4(r[c], r[4 + c], 0x44), b1 = _mm512_shuffle_f32x4(r[c], r[4 + c], 0xEE);
        const __m512 b2 = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0x44);
        const __m512 b3 = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0xEE);
        const __m512 col[4] = {_mm512_shuffle_f32x4(b0, b2, 0x88), _mm512_shuffle_f32x4(b0, b2, 0xDD),
                               _mm512_shuffle_f32x4(b1, b3, 0x88), _mm512_shuffle_f32x4(b1, b3, 0xDD)};
        for (int l = 0; l < 4; l++)
            if (4 * l + c < nn) _mm512_mask_storeu_ps(y + (4 * l + c) * ldy, m, col[l]);
    }
}

#endif
