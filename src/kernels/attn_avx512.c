// SPDX-License-Identifier: MIT
/* AVX-512 attention kernels (attn.h): 16 keys or dimensions per zmm, masked
 * loads and stores for the tails. The loops are attn_tmpl.h's; this file only
 * says what a vector is. Same bits as the scalar path in attn.c. */
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#include <stdint.h>

#include "ops_impl.h"

#define ATT_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,f16c,fma")))
#define ATT_INLINE static inline __attribute__((always_inline)) ATT_TARGET
#define ATT_LANES 16
#define ATT_V __m512
#define ATT_M __mmask16
/* scores: 4 heads x 2 vectors of keys x 4 lane classes = 32 accumulators
 * (fewer partial sums through memory than 8 heads x 2 vectors of one class) */
#define ATT_GROUP_MAX 4
#define ATT_QK_KVEC 2
#define ATT_QK_CLASSES 4
#define ATT_TREE_HEADS 4 /* the tree-order score tile: 4 heads x 5 partial sums = 20 zmm */
#define ATT_AV_HEADS 4   /* values: 4 heads x 4 vectors of dimensions */
#define ATT_AV_CHUNKS 4
#define ATT_QK_NAME kvt_attn_qk_avx512
#define ATT_AV_NAME kvt_attn_av_avx512

ATT_INLINE __mmask16 att_mask(int32_t left) {
    return left >= ATT_LANES ? (__mmask16)0xFFFF : left <= 0 ? (__mmask16)0 : (__mmask16)((1u << left) - 1);
}
ATT_INLINE __m512 att_zero(void) { return _mm512_setzero_ps(); }
ATT_INLINE __m512 att_set1(float x) { return _mm512_set1_ps(x); }
ATT_INLINE __m512 att_fma(__m512 a, __m512 b, __m512 c) { return _mm512_fmadd_ps(a, b, c); }
ATT_INLINE __m512 att_mul(__m512 a, __m512 b) { return _mm512_mul_ps(a, b); }
ATT_INLINE __m512 att_add(__m512 a, __m512 b) { return _mm512_add_ps(a, b); }
ATT_INLINE __m512 att_load(const void *p, int f16, int64_t off, __mmask16 m) {
    if (f16) return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, (const uint16_t *)p + off));
    return _mm512_maskz_loadu_ps(m, (const float *)p + off);
}
ATT_INLINE __m512 att_load_f32(const float *p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
ATT_INLINE __m512 att_load_q8(const int8_t *q, const uint16_t *sc, __mmask16 m) {
    const __m512 d = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, sc));
    return _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(m, q))));
}
ATT_INLINE __m512 att_load_q8_row(const uint8_t *blk, int32_t i, __mmask16 m) {
    const __m512 d = _mm512_set1_ps(_cvtsh_ss((unsigned short)(blk[0] | blk[1] << 8)));
    return _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(m, blk + 2 + i))));
}
ATT_INLINE void att_store_f32(float *p, __mmask16 m, __m512 v) { _mm512_mask_storeu_ps(p, m, v); }

#include "attn_tmpl.h"

#endif
