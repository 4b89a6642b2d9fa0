// SPDX-License-Identifier: MIT
/* AVX2 + FMA + F16C attention kernels (attn.h), for x86-64 CPUs without
 * AVX-512: 8 keys or dimensions per ymm. The loops are attn_tmpl.h's; this
 * file only says what a vector is. AVX2 has no masked 16-bit load, so a
 * partial f16 vector is staged through a zeroed buffer, and a partial f32 one
 * goes through maskload/maskstore (which touch no memory outside the mask).
 * Same bits as the scalar path in attn.c and the AVX-512 kernels. */
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "ops_impl.h"

#define ATT_TARGET __attribute__((target("avx2,fma,f16c")))
#define ATT_INLINE static inline __attribute__((always_inline)) ATT_TARGET
#define ATT_LANES 8
#define ATT_V __m256
/* 16 ymm registers: scores 6 heads x 2 vectors of keys = 12 accumulators;
 * values 4 heads x 3 vectors of dimensions = 12 */
#define ATT_GROUP_MAX 6
#define ATT_QK_KVEC 2
#define ATT_QK_CLASSES 1
#define ATT_TREE_HEADS 2 /* the tree-order score tile: 2 heads x 5 partial sums = 10 ymm */
#define ATT_AV_HEADS 4
#define ATT_AV_CHUNKS 3
#define ATT_QK_NAME kvt_attn_qk_avx2
#define ATT_AV_NAME kvt_attn_av_avx2

/* the lanes kept (for maskload/maskstore) and how many they are */
typedef struct {
    __m256i lanes;
    int32_t n;
} att_m8;
#define ATT_M att_m8

ATT_INLINE att_m8 att_mask(int32_t left) {
    const int32_t n = left >= ATT_LANES ? ATT_LANES : left < 0 ? 0 : left;
    return (att_m8){_mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)), n};
}
ATT_INLINE __m256 att_zero(void) { return _mm256_setzero_ps(); }
ATT_INLINE __m256 att_set1(float x) { return _mm256_set1_ps(x); }
ATT_INLINE __m256 att_fma(__m256 a, __m256 b, __m256 c) { return _mm256_fmadd_ps(a, b, c); }
ATT_INLINE __m256 att_mul(__m256 a, __m256 b) { return _mm256_mul_ps(a, b); }
ATT_INLINE __m256 att_add(__m256 a, __m256 b) { return _mm256_add_ps(a, b); }
ATT_INLINE __m256 att_load_f32(const float *p, att_m8 m) {
    return m.n == ATT_LANES ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, m.lanes);
}
ATT_INLINE __m256 att_load(const void *p, int f16, int64_t off, att_m8 m) {
    if (!f16) return att_load_f32((const float *)p + off, m);
    const uint16_t *h = (const uint16_t *)p + off;
    if (m.n == ATT_LANES) return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)h));
    uint16_t buf[ATT_LANES] = {0};
    memcpy(buf, h, (size_t)m.n * sizeof(uint16_t));
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)buf));
}
/* q8_0 (attn_tmpl.h): 8 int8 values and 8 f16 scales, or one block's scale;
 * a partial vector is staged through zeroed buffers like f16. */
ATT_INLINE __m256 att_load_q8(const int8_t *q, const uint16_t *sc, att_m8 m) {
    if (m.n == ATT_LANES)
        return _mm256_mul_ps(
            _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)sc)),
            _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)q))));
    int8_t qb[16] = {0};
    uint16_t sb[ATT_LANES] = {0};
    memcpy(qb, q, (size_t)m.n);
    memcpy(sb, sc, (size_t)m.n * sizeof(uint16_t));
    return _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)sb)),
                         _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)qb))));
}
ATT_INLINE __m256 att_load_q8_row(const uint8_t *blk, int32_t i, att_m8 m) {
    const __m256 d = _mm256_set1_ps(_cvtsh_ss((unsigned short)(blk[0] | blk[1] << 8)));
    const uint8_t *q = blk + 2 + i;
    if (m.n == ATT_LANES)
        return _mm256_mul_ps(
            d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)q))));
    int8_t qb[16] = {0};
    memcpy(qb, q, (size_t)m.n);
    return _mm256_mul_ps(d,
                         _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)qb))));
}
ATT_INLINE void att_store_f32(float *p, att_m8 m, __m256 v) {
    if (m.n == ATT_LANES) _mm256_storeu_ps(p, v);
    else _mm256_maskstore_ps(p, m.lanes, v);
}

#include "attn_tmpl.h"

#endif
