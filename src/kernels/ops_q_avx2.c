// SPDX-License-Identifier: MIT
/* AVX2 matmul for the legacy weight types Q4_0, Q4_1, Q5_0, Q5_1 and IQ4_NL;
 * same bits as kvt_ql_dot_scalar (see ops_q_avx512.c); IQ4_NL's values (up to
 * 127 in magnitude) take the signed form of the dot, sums4_signed. A block's
 * 32 weights are one ymm of int8 q - zero in natural order; maddubs (biased u8 activations x
 * int8 weights, no saturation: |255 * 31 * 2| < 2^15) then madd by ones gives
 * the exact sums of 4 in natural lane order, minus 128 * the weights' sums.
 * The canonical 16 lanes are two ymm: block 2m in lo, block 2m+1 in hi.
 * Decode (one token) has its own tile, tile_dec: QDRM rows, the raw quants as
 * maddubs' unsigned operand and the activations (xq ^ 0x80) as its signed
 * one, the zero point folded into a per-token start, so the rows pay no
 * correction (as the AVX-512 decode tile, ops_q_avx512.c). */
#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "ops_impl.h"
#include "ops_tileloop.h"
#include "quant_legacy.h"

#define T2 __attribute__((target("avx2,fma,f16c")))
#define INLINE2 static inline __attribute__((always_inline)) T2

#define QRM 2
#define QRN 2
#define QDRM 4
#define BIAS_SHIFT 7  /* 128 = KVT_Q8_ACT_BIAS */
#define MIN_LANE 0x01 /* lane 0 of a block's 8: where its min term goes */

INLINE2 float hsum16(__m256 lo, __m256 hi) {
    __m256 s8 = _mm256_add_ps(lo, hi);
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));
}

/* The 32 quants of one block as they are stored (0-15, or 0-31 with Q5's
 * fifth bit), natural order: the 16 bytes in both halves, the high half
 * shifted a nibble down. */
INLINE2 __m256i unpack_raw(kvt_ql_layout f, const uint8_t *blk) {
    const __m256i qs = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)(blk + f.qs_off)));
    __m256i z = _mm256_and_si256(_mm256_srlv_epi32(qs, _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4)),
                                 _mm256_set1_epi8(0x0F));
    if (f.nl) { /* IQ4_NL: code -> value + 128 */
        static const uint8_t book[16] = KVT_IQ4NL_BIASED;
        z = _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)book)), z);
    }
    if (f.qh_off >= 0) {
        uint32_t h;
        memcpy(&h, blk + f.qh_off, sizeof h);
        /* byte i takes byte i/8 of h, then tests its bit i%8 */
        const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2,
                                                3, 3, 3, 3, 3, 3, 3, 3);
        const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
        __m256i hv = _mm256_shuffle_epi8(_mm256_set1_epi32((int)h), spread);
        hv = _mm256_cmpeq_epi8(_mm256_and_si256(hv, bit), bit);
        z = _mm256_or_si256(z, _mm256_and_si256(hv, _mm256_set1_epi8(0x10)));
    }
    return z;
}

/* The 32 weights of one block as int8 q - zero, natural order. */
INLINE2 __m256i unpack(kvt_ql_layout f, const uint8_t *blk) {
    const __m256i z = unpack_raw(f, blk);
    return f.zero ? _mm256_sub_epi8(z, _mm256_set1_epi8((char)f.zero)) : z;
}

/* Exact sums of each 4 products u8 x s8, natural lane order. */
INLINE2 __m256i sums4(__m256i u, __m256i s) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}

/* The same for two signed operands of magnitude <= 127 (IQ4_NL's values,
 * where a biased u8 operand could saturate maddubs' pairs): |w| by x with
 * w's sign, each pair at most 2 * 127 * 127 < 2^15. */
INLINE2 __m256i sums4_signed(__m256i w, __m256i x) { return sums4(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w)); }

/* Per row and block: the weights, 128 * their sums of 4, d, m. */
typedef struct {
    __m256i w, corr;
    float d, m;
} wblock;

INLINE2 wblock load_block(kvt_ql_layout f, const uint8_t *blk, int present) {
    wblock b = {_mm256_setzero_si256(), _mm256_setzero_si256(), 0.0f, 0.0f};
    if (!present) return b; /* contributes fma(0, 0, lane), as the scalar code */
    b.w = unpack(f, blk);
    if (!f.nl) b.corr = _mm256_slli_epi32(sums4(_mm256_set1_epi8(1), b.w), BIAS_SHIFT);
    b.d = _cvtsh_ss(kvt_load_u16(blk));
    if (f.m_off >= 0) b.m = _cvtsh_ss(kvt_load_u16(blk + f.m_off));
    return b;
}

INLINE2 __m256 block_step(kvt_ql_layout f, const wblock *wb, const uint8_t *xq, float xd, float xs, __m256 acc) {
    const __m256i x = _mm256_loadu_si256((const __m256i *)(const void *)xq);
    const __m256i p = f.nl ? sums4_signed(wb->w, _mm256_xor_si256(x, _mm256_set1_epi8((char)0x80)))
                           : _mm256_sub_epi32(sums4(x, wb->w), wb->corr);
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(wb->d * xd), acc);
    if (f.m_off >= 0)
        acc = _mm256_fmadd_ps(_mm256_blend_ps(_mm256_setzero_ps(), _mm256_set1_ps(wb->m), MIN_LANE),
                              _mm256_blend_ps(_mm256_setzero_ps(), _mm256_set1_ps(xs), MIN_LANE), acc);
    return acc;
}

INLINE2 void tile(kvt_ql_layout f, const uint8_t *const *wr, const uint8_t *const *xq, const float *const *xd,
                  const float *const *xs, int rm, int rn, int64_t k, float *out) {
    const int64_t nb = k / KVT_QL_BLOCK;
    __m256 lo[QRM][QRN], hi[QRM][QRN];
    _Pragma("GCC unroll 4") for (int i = 0; i < rm; i++) _Pragma("GCC unroll 4") for (int j = 0; j < rn; j++)
        lo[i][j] = hi[i][j] = _mm256_setzero_ps();
    /* decode streams each weight once: prefetch the same place in the next
     * tile's rows, as the Q8_0 tile does (a hint, so the same bits) */
    const ptrdiff_t pf_ahead = (wr[1] - wr[0]) * rm * KVT_PF_TILES;
    for (int64_t b = 0; b < nb; b += 2) {
        _Pragma("GCC unroll 4") for (int i = 0; i < rm; i++) {
            const uint8_t *blk = wr[i] + b * f.bytes;
            KVT_PREFETCH_WEIGHTS(blk + pf_ahead); /* 2 blocks: 36-48 bytes */
            const wblock w0 = load_block(f, blk, 1), w1 = load_block(f, blk + f.bytes, b + 1 < nb);
            _Pragma("GCC unroll 4") for (int j = 0; j < rn; j++) {
                const uint8_t *x = xq[j] + b * KVT_QL_BLOCK;
                const float s0 = f.m_off >= 0 ? xs[j][b] : 0.0f, s1 = f.m_off >= 0 ? xs[j][b + 1] : 0.0f;
                lo[i][j] = block_step(f, &w0, x, xd[j][b], s0, lo[i][j]);
                hi[i][j] = block_step(f, &w1, x + KVT_QL_BLOCK, xd[j][b + 1], s1, hi[i][j]);
            }
        }
    }
    _Pragma("GCC unroll 4") for (int i = 0; i < rm; i++) _Pragma("GCC unroll 4") for (int j = 0; j < rn; j++)
        out[i * rn + j] = hsum16(lo[i][j], hi[i][j]);
}

/* ---- decode tile: QDRM rows x 1 token ------------------------------------
 * Per lane the same integer as `tile`, sum of 4 (q - zero) * x, as
 * maddubs(q, x) summed by pairs plus the token's start -zero * (sum of 4 x)
 * = sums4(xq, -zero) + 4 * 128 * zero (xq = x + 128; no saturation:
 * 31 * 127 * 2 and 255 * 16 * 2 < 2^15). The rows' f16 scales (and mins) of
 * a block pair are converted at once and multiplied by d_x once; each row
 * and block then costs one unpack, maddubs, madd, add, convert and fma. A
 * missing last block is skipped: the tiles add fma(0, 0, lane) there, which
 * leaves a lane unchanged (a lane is never -0: it starts at +0, and x + -x
 * rounds to +0). */
INLINE2 void tile_dec(kvt_ql_layout f, const uint8_t *const *wr, const uint8_t *const *xq, const float *const *xd,
                      const float *const *xs, int rn, int64_t k, float *out) {
    (void)rn; /* always 1 */
    const int64_t nb = k / KVT_QL_BLOCK;
    const __m256i flip = _mm256_set1_epi8((char)0x80);
    const __m256i minus_zero = _mm256_set1_epi8((char)-f.zero);
    const __m256i zero_off = _mm256_set1_epi32(KVT_Q8_GROUP * KVT_Q8_ACT_BIAS * f.zero);
    const ptrdiff_t pf_ahead = (wr[1] - wr[0]) * QDRM * KVT_PF_TILES; /* the same place KVT_PF_TILES tiles on */
    __m256 acc[QDRM][2];
    _Pragma("GCC unroll 4") for (int i = 0; i < QDRM; i++) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b += 2) {
        const int nh = b + 1 < nb ? 2 : 1;
        /* lane h * QDRM + i: row i, block b + h */
        __m128i dh = _mm_setzero_si128(), mh = _mm_setzero_si128();
        _Pragma("GCC unroll 2") for (int h = 0; h < nh; h++) _Pragma("GCC unroll 4") for (int i = 0; i < QDRM; i++) {
            const uint8_t *blk = wr[i] + (b + h) * f.bytes;
            dh = _mm_insert_epi16(dh, kvt_load_u16(blk), h * QDRM + i);
            if (f.m_off >= 0) mh = _mm_insert_epi16(mh, kvt_load_u16(blk + f.m_off), h * QDRM + i);
        }
        float dwx[2 * QDRM] __attribute__((aligned(32))), mw[2 * QDRM] __attribute__((aligned(32)));
        _mm256_store_ps(
            dwx, _mm256_mul_ps(_mm256_cvtph_ps(dh), _mm256_setr_m128(_mm_set1_ps(xd[0][b]), _mm_set1_ps(xd[0][b + 1]))));
        if (f.m_off >= 0) _mm256_store_ps(mw, _mm256_cvtph_ps(mh));
        _Pragma("GCC unroll 2") for (int h = 0; h < nh; h++) {
            const __m256i xb = _mm256_loadu_si256((const __m256i *)(const void *)(xq[0] + (b + h) * KVT_QL_BLOCK));
            const __m256i xv = _mm256_xor_si256(xb, flip);
            const __m256i start = f.zero && !f.nl ? _mm256_add_epi32(sums4(xb, minus_zero), zero_off)
                                                  : _mm256_setzero_si256();
            const __m256 sx = f.m_off >= 0
                ? _mm256_blend_ps(_mm256_setzero_ps(), _mm256_set1_ps(xs[0][b + h]), MIN_LANE)
                : _mm256_setzero_ps();
            _Pragma("GCC unroll 4") for (int i = 0; i < QDRM; i++) {
                const uint8_t *blk = wr[i] + (b + h) * f.bytes;
                if (h == 0) KVT_PREFETCH_WEIGHTS(blk + pf_ahead);
                const __m256i p = f.nl ? sums4_signed(unpack(f, blk), xv)
                                       : _mm256_add_epi32(sums4(unpack_raw(f, blk), xv), start);
                acc[i][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_broadcast_ss(&dwx[h * QDRM + i]), acc[i][h]);
                if (f.m_off >= 0)
                    acc[i][h] = _mm256_fmadd_ps(
                        _mm256_blend_ps(_mm256_setzero_ps(), _mm256_broadcast_ss(&mw[h * QDRM + i]), MIN_LANE), sx,
                        acc[i][h]);
            }
        }
    }
    _Pragma("GCC unroll 4") for (int i = 0; i < QDRM; i++) out[i] = hsum16(acc[i][0], acc[i][1]);
}

/* kvt_ql_mm_*: one tile per legacy type, run by the shared loop (ops_tileloop.h) */
KVT_QL_DEFINE_MM_DEC(kvt_ql_mm_avx2, T2, KVT_TILE_BY_N2, QDRM, 1)
