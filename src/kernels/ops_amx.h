/* What the AMX kernels (ops_k_x86.c, ops_q8_amx.c) share: their target
 * attribute and the tile configuration a matmul loads for its duration. */
#ifndef KVT_OPS_AMX_H
#define KVT_OPS_AMX_H

#include <immintrin.h>
#include <stdint.h>

#define T_AMX __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,fma,f16c,amx-tile,amx-int8")))

/* The 64-byte operand of ldtilecfg (palette 1): bytes per row and rows of
 * each of the 8 tile registers. */
typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} kvt_amx_cfg;

#define KVT_AMX_N 16 /* tokens per tile: B's dwords per row, one zmm */

/* B tiles' layout for nt <= 16 tokens: bt[d][n] = dword d of token n's row at
 * q0 + n * stride (d < ndw; tokens past nt 0), each byte xor flip. */
static inline __attribute__((always_inline)) T_AMX void kvt_amx_gather_tokens(const void *q0, int64_t stride, int nt,
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

#endif
