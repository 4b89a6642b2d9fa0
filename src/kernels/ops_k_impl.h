// SPDX-License-Identifier: MIT
/* Internal to the x86 K-quant kernels (ops_k_x86.c, ops_qkt_avx512.c): the
 * pieces of a packed super-block that both decode in registers. */
#ifndef KVT_OPS_K_IMPL_H
#define KVT_OPS_K_IMPL_H

#include <immintrin.h>
#include <stdint.h>

#include "quant_k.h"

/* Q4_K/Q5_K's eight 6-bit scales and eight mins (layout in quant_k.c) from the
 * 12 scale bytes: bytes [sc0..sc7, mn0..mn7]. */
static inline __attribute__((always_inline, target("avx2,fma,f16c"))) __m128i kvt_q45k_scales_vec(const uint8_t *blk) {
    const __m128i v = _mm_loadu_si128((const __m128i *)(const void *)(blk + KVT_Q45K_SCALES)); /* 12 used */
    /* low parts: s[0..3] & 63, s[8..11] & 15, s[4..7] & 63, s[8..11] >> 4 */
    const __m128i a = _mm_shuffle_epi8(v, _mm_setr_epi8(0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 8, 9, 10, 11));
    const __m128i lo = _mm_and_si128(_mm_blend_epi16(a, _mm_srli_epi16(a, 4), 0xC0),
                                     _mm_setr_epi8(63, 63, 63, 63, 15, 15, 15, 15, 63, 63, 63, 63, 15, 15, 15, 15));
    /* high 2 bits of scales/mins 4..7: the top bits of s[0..3] / s[4..7], moved to bits 4-5 */
    const __m128i b = _mm_shuffle_epi8(v, _mm_setr_epi8(-1, -1, -1, -1, 0, 1, 2, 3, -1, -1, -1, -1, 4, 5, 6, 7));
    return _mm_or_si128(lo, _mm_and_si128(_mm_srli_epi16(b, 2), _mm_set1_epi8(0x30)));
}

#endif
