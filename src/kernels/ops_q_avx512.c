// SPDX-License-Identifier: MIT
/* AVX-512 (BW, VNNI) matmul for the legacy weight types Q4_0, Q4_1, Q5_0,
 * Q5_1 and IQ4_NL (its codes looked up as value + 128, zero 128). Same bits
 * as kvt_ql_dot_scalar: per block pair, the 64 weights are
 * unpacked to int8 (q - zero) in natural order, each 32-bit lane takes the
 * exact integer dot of 4 of them with the activations (VNNI on the biased u8
 * activations, minus 128 * the weights' sum), then one fma by d_w * d_x, then
 * for Q4_1/Q5_1 one fma of m_w * s_x on lanes 0 and 8; the canonical lane tree
 * at the end. Tiles of QRM rows x QRN tokens (ops_tileloop.h), and for
 * decode (1-2 tokens) tile_dec: QDRM rows, the roles of the VNNI operands
 * swapped so that the weights need no per-row correction. */
#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "ops_impl.h"
#include "ops_tileloop.h"
#include "quant_legacy.h"

#define T512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,fma,f16c")))
#define INLINE512 static inline __attribute__((always_inline)) T512

#define QRM 2
#define QRN 6
#define QDRM 8
#define QDRN 2
#define MIN_LANES 0x0101 /* lanes 0 and 8: where the min term of each block goes */
#define BIAS_SHIFT 7     /* 128 = KVT_Q8_ACT_BIAS */

INLINE512 float hsum16(__m512 v) {
    __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));
}

INLINE512 uint32_t ld32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

INLINE512 __m512 pair_ps(float lo, float hi) { return _mm512_insertf32x8(_mm512_set1_ps(lo), _mm256_set1_ps(hi), 1); }

/* The quants of blocks a and (if has_b) b as 64 bytes q, natural order:
 * 128-bit chunks [a, a, b, b], the second of each pair shifted a nibble down. */
INLINE512 __m512i unpack_pair_raw(kvt_ql_layout f, const uint8_t *a, const uint8_t *b, int has_b) {
    __m512i z = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(const void *)(a + f.qs_off)));
    z = has_b ? _mm512_mask_broadcast_i32x4(z, 0xFF00, _mm_loadu_si128((const __m128i *)(const void *)(b + f.qs_off)))
              : _mm512_maskz_mov_epi32(0x00FF, z);
    z = _mm512_and_si512(_mm512_mask_srli_epi16(z, 0xFF00FF00u, z, 4), _mm512_set1_epi8(0x0F));
    if (f.nl) { /* IQ4_NL: code -> value + 128 (a missing block's codes read -127, against d = 0 and x = 0) */
        static const uint8_t book[16] = KVT_IQ4NL_BIASED;
        z = _mm512_shuffle_epi8(_mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(const void *)book)), z);
    }
    if (f.qh_off >= 0) {
        uint64_t h = ld32(a + f.qh_off);
        if (has_b) h |= (uint64_t)ld32(b + f.qh_off) << 32;
        z = _mm512_mask_add_epi8(z, (__mmask64)h, z, _mm512_set1_epi8(0x10)); /* bit 4 is clear */
    }
    return z;
}

/* Weights of blocks a and (if has_b) b as 64 int8 q - zero, natural order. */
INLINE512 __m512i unpack_pair(kvt_ql_layout f, const uint8_t *a, const uint8_t *b, int has_b) {
    const __m512i z = unpack_pair_raw(f, a, b, has_b);
    return f.zero ? _mm512_sub_epi8(z, _mm512_set1_epi8((char)f.zero)) : z;
}

INLINE512 void tile(kvt_ql_layout f, const uint8_t *const *wr, const uint8_t *const *xq, const float *const *xd,
                    const float *const *xs, int rm, int rn, int64_t k, float *out) {
    const int64_t nb = k / KVT_QL_BLOCK;
    const __m512i ones = _mm512_set1_epi8(1);
    __m512 acc[QRM][QRN];
    _Pragma("GCC unroll 8") for (int i = 0; i < rm; i++) _Pragma("GCC unroll 8") for (int j = 0; j < rn; j++)
        acc[i][j] = _mm512_setzero_ps();
    /* decode (tiles of 1-2 tokens) streams each weight once: prefetch the same
     * place KVT_PF_TILES tiles on, as the Q8_0 tile does (a hint, same bits) */
    const ptrdiff_t pf_ahead = (wr[1] - wr[0]) * rm * KVT_PF_TILES;
    for (int64_t b = 0; b < nb; b += 2) {
        const int has_hi = b + 1 < nb;
        __m512i wq[QRM], ncorr[QRM];
        __m512 dw[QRM], mw[QRM];
        _Pragma("GCC unroll 8") for (int i = 0; i < rm; i++) {
            const uint8_t *blk = wr[i] + b * f.bytes, *blk2 = blk + f.bytes;
            if (rn <= 2) KVT_PREFETCH_WEIGHTS(blk + pf_ahead);
            wq[i] = unpack_pair(f, blk, blk2, has_hi);
            ncorr[i] = _mm512_sub_epi32(
                _mm512_setzero_si512(),
                _mm512_slli_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, wq[i]), BIAS_SHIFT));
            dw[i] = pair_ps(_cvtsh_ss(kvt_load_u16(blk)), has_hi ? _cvtsh_ss(kvt_load_u16(blk2)) : 0.0f);
            if (f.m_off >= 0)
                mw[i] = _mm512_maskz_mov_ps(MIN_LANES,
                                            pair_ps(_cvtsh_ss(kvt_load_u16(blk + f.m_off)),
                                                    has_hi ? _cvtsh_ss(kvt_load_u16(blk2 + f.m_off)) : 0.0f));
        }
        _Pragma("GCC unroll 8") for (int j = 0; j < rn; j++) {
            const __m512i xv = _mm512_loadu_si512(xq[j] + b * KVT_QL_BLOCK);
            const __m512 dx = pair_ps(xd[j][b], xd[j][b + 1]);
            __m512 sx = _mm512_setzero_ps();
            if (f.m_off >= 0) sx = _mm512_maskz_mov_ps(MIN_LANES, pair_ps(xs[j][b], xs[j][b + 1]));
            _Pragma("GCC unroll 8") for (int i = 0; i < rm; i++) {
                const __m512i p = _mm512_dpbusd_epi32(ncorr[i], xv, wq[i]);
                acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_mul_ps(dw[i], dx), acc[i][j]);
                if (f.m_off >= 0) acc[i][j] = _mm512_fmadd_ps(mw[i], sx, acc[i][j]);
            }
        }
    }
    _Pragma("GCC unroll 8") for (int i = 0; i < rm; i++) _Pragma("GCC unroll 8") for (int j = 0; j < rn; j++)
        out[i * rn + j] = hsum16(acc[i][j]);
}

/* ---- decode tile ----------------------------------------------------------
 * The same integer per lane as `tile`, sum of 4 (q - zero) * x, formed the
 * other way round: the raw quants q (0-31) are VNNI's unsigned operand and the
 * activations x (xq ^ 0x80) its signed one, the zero point folded into a
 * per-token start, -zero * (sum of 4 x) = dpbusd(4 * 128 * zero, xq, -zero)
 * (xq = x + 128; 4 = KVT_Q8_GROUP). All the per-token work and the scales
 * of the QDRM rows (one f16 -> f32 conversion) are shared by the rows; each
 * row pays only for unpacking its quants, then one dpbusd, permute and fma
 * per token. */

/* The f16 at byte `off` of each row's block (lanes 0-7, rows 0-7) and of the
 * block after it (lanes 8-15; zero without has_b), as f32. */
INLINE512 __m512 row_halves(const uint8_t *const *wr, int64_t off, int64_t next, int has_b) {
    __m128i lo = _mm_cvtsi32_si128(kvt_load_u16(wr[0] + off)), hi = _mm_setzero_si128();
    _Pragma("GCC unroll 8") for (int i = 1; i < QDRM; i++) lo = _mm_insert_epi16(lo, kvt_load_u16(wr[i] + off), i);
    if (has_b)
        _Pragma("GCC unroll 8") for (int i = 0; i < QDRM; i++)
            hi = _mm_insert_epi16(hi, kvt_load_u16(wr[i] + off + next), i);
    return _mm512_cvtph_ps(_mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1));
}

/* One block pair (b, b + 1; b alone without has_hi) of tile_dec's rows. */
INLINE512 void dec_pair(kvt_ql_layout f, const uint8_t *const *wr, const uint8_t *const *xq, const float *const *xd,
                        const float *const *xs, int rn, int64_t b, int has_hi, __m512 acc[QDRM][QDRN]) {
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    const __m512i minus_zero = _mm512_set1_epi8((char)-f.zero);
    const __m512i zero_off = _mm512_set1_epi32(KVT_Q8_GROUP * KVT_Q8_ACT_BIAS * f.zero);
    const ptrdiff_t pf_ahead = (wr[1] - wr[0]) * QDRM * KVT_PF_TILES; /* the same place KVT_PF_TILES tiles on */
    const int64_t off = b * f.bytes;
    const __m512 dw = row_halves(wr, off, f.bytes, has_hi);
    const __m512 mw = f.m_off >= 0 ? row_halves(wr, off + f.m_off, f.bytes, has_hi) : _mm512_setzero_ps();
    __m512i xv[QDRN], start[QDRN];
    __m512 dwx[QDRN], sx[QDRN];
    _Pragma("GCC unroll 8") for (int j = 0; j < rn; j++) {
        const __m512i xb = _mm512_loadu_si512(xq[j] + b * KVT_QL_BLOCK);
        xv[j] = _mm512_xor_si512(xb, flip);
        start[j] = f.zero ? _mm512_dpbusd_epi32(zero_off, xb, minus_zero) : _mm512_setzero_si512();
        dwx[j] = _mm512_mul_ps(dw, pair_ps(xd[j][b], xd[j][b + 1]));
        sx[j] = f.m_off >= 0 ? _mm512_maskz_mov_ps(MIN_LANES, pair_ps(xs[j][b], xs[j][b + 1])) : _mm512_setzero_ps();
    }
    _Pragma("GCC unroll 8") for (int i = 0; i < QDRM; i++) {
        /* row i's scales: lanes 0-7 take lane i, lanes 8-15 lane 8 + i */
        const __m512i spread = _mm512_inserti64x4(_mm512_set1_epi32(i), _mm256_set1_epi32(QDRM + i), 1);
        const uint8_t *blk = wr[i] + off;
        KVT_PREFETCH_WEIGHTS(blk + pf_ahead);
        const __m512i wq = unpack_pair_raw(f, blk, blk + f.bytes, has_hi);
        _Pragma("GCC unroll 8") for (int j = 0; j < rn; j++) {
            const __m512 isum = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(start[j], wq, xv[j]));
            acc[i][j] = _mm512_fmadd_ps(isum, _mm512_permutexvar_ps(spread, dwx[j]), acc[i][j]);
            if (f.m_off >= 0)
                acc[i][j] = _mm512_fmadd_ps(_mm512_maskz_permutexvar_ps(MIN_LANES, spread, mw), sx[j], acc[i][j]);
        }
    }
}

INLINE512 void tile_dec(kvt_ql_layout f, const uint8_t *const *wr, const uint8_t *const *xq, const float *const *xd,
                        const float *const *xs, int rn, int64_t k, float *out) {
    const int64_t nb = k / KVT_QL_BLOCK;
    __m512 acc[QDRM][QDRN];
    _Pragma("GCC unroll 8") for (int i = 0; i < QDRM; i++) _Pragma("GCC unroll 8") for (int j = 0; j < rn; j++)
        acc[i][j] = _mm512_setzero_ps();
    int64_t b = 0;
    for (; b + 1 < nb; b += 2) dec_pair(f, wr, xq, xd, xs, rn, b, 1, acc);
    if (b < nb) dec_pair(f, wr, xq, xd, xs, rn, b, 0, acc);
    _Pragma("GCC unroll 8") for (int i = 0; i < QDRM; i++) _Pragma("GCC unroll 8") for (int j = 0; j < rn; j++)
        out[i * rn + j] = hsum16(acc[i][j]);
}

/* kvt_ql_mm_*: one tile per legacy type, run by the shared loop (ops_tileloop.h) */
KVT_QL_DEFINE_MM_DEC(kvt_ql_mm_avx512, T512, KVT_TILE_BY_N6, QDRM, 2)
