// SPDX-License-Identifier: MIT
/* AVX-512 variant (F, BW, VL, DQ, VNNI + F16C/FMA) of the kernels. Same bits as
 * the scalar variant in ops.c: one 16-lane accumulator per output element,
 * stepped through k in order, then the canonical lane tree.
 *
 * Matmul blocking (ops_tileloop.h, shared with the other variants): the W rows
 * of a thread are processed RM at a time against tiles of RN tokens; tokens
 * are walked in chunks sized so the chunk's activations stay in L2 while the
 * RM rows (converted on the fly, or widened to f32 once) stay in L1. */
#include <immintrin.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "ops_impl.h"
#include "ops_tileloop.h"
#include "quant_k.h"

#define T512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,fma,f16c")))
#define INLINE512 static inline __attribute__((always_inline)) T512

/* Float tile: 4 W rows x 6 tokens = 24 accumulators + 4 W vectors + 1 x (of 32 zmm). */
#define RM 4
#define RN 6
/* f32 element size, and the AVX-512 vector in elements. */
#define V 16

/* The 8-lane tree (the "lanes" Q8_0 dot's; the last rounds of the 16-lane one), and the 16-lane tree. */
INLINE512 float hsum8(__m256 s8) {
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));
}
INLINE512 float hsum16(__m512 v) {
    return hsum8(_mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1)));
}

/* 16 weights from element k of a row, as f32; the _m forms load only `m` lanes. */
INLINE512 __m512 ldw_f32(const uint8_t *row, int64_t k) { return _mm512_loadu_ps(row + 4 * k); }
INLINE512 __m512 ldw_f32_m(const uint8_t *row, int64_t k, __mmask16 m) { return _mm512_maskz_loadu_ps(m, row + 4 * k); }
INLINE512 __m512 ldw_f16(const uint8_t *row, int64_t k) {
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(row + 2 * k)));
}
INLINE512 __m512 ldw_f16_m(const uint8_t *row, int64_t k, __mmask16 m) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, row + 2 * k));
}
INLINE512 __m512 bf16_widen(__m256i h) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); }
INLINE512 __m512 ldw_bf16(const uint8_t *row, int64_t k) {
    return bf16_widen(_mm256_loadu_si256((const __m256i *)(const void *)(row + 2 * k)));
}
INLINE512 __m512 ldw_bf16_m(const uint8_t *row, int64_t k, __mmask16 m) {
    return bf16_widen(_mm256_maskz_loadu_epi16(m, row + 2 * k));
}

/* out[i*rn + j] = dot(W row wr[i], x row xr[j]) over k elements; rm, rn are
 * compile-time constants after inlining, so acc[][] lives in registers. */
/* Software prefetch distance along a weight row, in bytes: decode (one token)
 * streams every weight once, and the hardware prefetcher alone leaves half
 * the memory bandwidth unused on the 4 interleaved row streams of a tile. */
#define PF_BYTES 1024
#define DEF_TILE(NAME, LDW, LDWM, ELEM) \
    INLINE512 void NAME(const uint8_t *const *wr, const float *const *xr, int rm, int rn, int64_t k, float *out) { \
        __m512 acc[RM][RN]; \
        /* the same place KVT_PF_TILES tiles on (rows are contiguous; a clamped                    \
         * tail makes this a harmless prefetch of data already read) */ \
        const ptrdiff_t pf_ahead = (rm > 1 ? (wr[1] - wr[0]) * rm : PF_BYTES) * KVT_PF_TILES; \
        _Pragma("GCC unroll 8") for (int i = 0; i < rm; i++) _Pragma("GCC unroll 8") for (int j = 0; j < rn; j++) \
            acc[i][j] = _mm512_setzero_ps(); \
        int64_t kk = 0; \
        for (; kk + V <= k; kk += V) { \
            __m512 wv[RM]; \
            _Pragma("GCC unroll 8") for (int i = 0; i < rm; i++) { \
                if (rn <= 2) KVT_PREFETCH_WEIGHTS(wr[i] + pf_ahead + kk * (ELEM)); \
                wv[i] = LDW(wr[i], kk); \
            } \
            _Pragma("GCC unroll 8") for (int j = 0; j < rn; j++) { \
                __m512 xv = _mm512_loadu_ps(xr[j] + kk); \
                _Pragma("GCC unroll 8") for (int i = 0; i < rm; i++) acc[i][j] = _mm512_fmadd_ps(wv[i], xv, acc[i][j]); \
            } \
        } \
        if (kk < k) { \
            __mmask16 m = (__mmask16)((1u << (k - kk)) - 1); \
            __m512 wv[RM]; \
            _Pragma("GCC unroll 8") for (int i = 0; i < rm; i++) wv[i] = LDWM(wr[i], kk, m); \
            _Pragma("GCC unroll 8") for (int j = 0; j < rn; j++) { \
                __m512 xv = _mm512_loadu_ps(xr[j] + kk); /* zero padded */ \
                _Pragma("GCC unroll 8") for (int i = 0; i < rm; i++) acc[i][j] = _mm512_fmadd_ps(wv[i], xv, acc[i][j]); \
            } \
        } \
        _Pragma("GCC unroll 8") for (int i = 0; i < rm; i++) _Pragma("GCC unroll 8") for (int j = 0; j < rn; j++) \
            out[i * rn + j] = hsum16(acc[i][j]); \
    }

DEF_TILE(tile_f32, ldw_f32, ldw_f32_m, 4)
DEF_TILE(tile_f16, ldw_f16, ldw_f16_m, 2)
DEF_TILE(tile_bf16, ldw_bf16, ldw_bf16_m, 2)

/* "lanes" tiles: 4 rows (in pairs, one zmm per pair and token, each pair
 * needing 3 vectors: quants, bias correction, scales) x 6 tokens. */
#define QLRM 4
#define QLRN 6
/* Q8_0, "lanes" order (ops.h): two W rows share each zmm, row 2p in lanes 0-7 and row 2p+1 in lanes
 * 8-15, each half being ops.h's 8 lanes of its output; one block per step. So
 * one 512-bit fma takes two outputs through a block with exactly the 8-lane
 * order's operations. The activation bias comes off inside the integer dot
 * (it accumulates onto -128 * the weights' group sums), which is exact. */
INLINE512 void tile_q8l(const uint8_t *const *wr, const uint8_t *const *xq, const float *const *xd, int rm, int rn,
                        int64_t k, float *out) {
    const int64_t nb = k / KVT_Q8_0_BLOCK;
    const int rp = rm / 2;
    const __m512i ones = _mm512_set1_epi8(1);
    __m512 acc[QLRM / 2][QLRN];
    _Pragma("GCC unroll 8") for (int p = 0; p < rp; p++) _Pragma("GCC unroll 8") for (int j = 0; j < rn; j++)
        acc[p][j] = _mm512_setzero_ps();
    /* decode streams each weight once: prefetch the same place KVT_PF_TILES tiles on, as the float tiles do */
    const ptrdiff_t pf_ahead = (wr[1] - wr[0]) * rm * KVT_PF_TILES;
    for (int64_t b = 0; b < nb; b++) {
        __m512i wq[QLRM / 2], ncorr[QLRM / 2];
        __m512 dw[QLRM / 2];
        _Pragma("GCC unroll 8") for (int p = 0; p < rp; p++) {
            const uint8_t *b0 = wr[2 * p] + b * KVT_Q8_0_BYTES, *b1 = wr[2 * p + 1] + b * KVT_Q8_0_BYTES;
            if (rn <= 2) {
                KVT_PREFETCH_WEIGHTS(b0 + pf_ahead);
                KVT_PREFETCH_WEIGHTS(b1 + pf_ahead);
            }
            wq[p] = _mm512_inserti64x4(
                _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(const void *)(b0 + KVT_Q8_0_SCALE_BYTES))),
                _mm256_loadu_si256((const __m256i *)(const void *)(b1 + KVT_Q8_0_SCALE_BYTES)), 1);
            ncorr[p] = _mm512_sub_epi32(_mm512_setzero_si512(),
                                        _mm512_slli_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, wq[p]), 7));
            dw[p] = _mm512_insertf32x8(_mm512_set1_ps(_cvtsh_ss(kvt_load_u16(b0))),
                                       _mm256_set1_ps(_cvtsh_ss(kvt_load_u16(b1))), 1);
        }
        _Pragma("GCC unroll 8") for (int j = 0; j < rn; j++) {
            const __m512i xv = _mm512_broadcast_i64x4(
                _mm256_loadu_si256((const __m256i *)(const void *)(xq[j] + b * KVT_Q8_0_BLOCK)));
            const __m512 dx = _mm512_set1_ps(xd[j][b]);
            _Pragma("GCC unroll 8") for (int p = 0; p < rp; p++) {
                const __m512 pf = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(ncorr[p], xv, wq[p]));
                acc[p][j] = _mm512_fmadd_ps(pf, _mm512_mul_ps(dw[p], dx), acc[p][j]);
            }
        }
    }
    _Pragma("GCC unroll 8") for (int p = 0; p < rp; p++) _Pragma("GCC unroll 8") for (int j = 0; j < rn; j++) {
        out[2 * p * rn + j] = hsum8(_mm512_castps512_ps256(acc[p][j]));
        out[(2 * p + 1) * rn + j] = hsum8(_mm512_extractf32x8_ps(acc[p][j], 1));
    }
}

/* The Q8_0 tiles' flipped operands (see tile_q8l_dec): two rows' quants of
 * one block as u8 (w + 128), row b0 in the low half; one token's block as s8
 * in both halves (xs), and its groups' start value -128 * sum(q) (nbias). */
INLINE512 __m512i q8_pair_u8(const uint8_t *b0, const uint8_t *b1) {
    return _mm512_xor_si512(
        _mm512_inserti64x4(
            _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(const void *)(b0 + KVT_Q8_0_SCALE_BYTES))),
            _mm256_loadu_si256((const __m256i *)(const void *)(b1 + KVT_Q8_0_SCALE_BYTES)), 1),
        _mm512_set1_epi8((char)0x80));
}
INLINE512 void q8_token_s8(const uint8_t *xb, __m512i *xs, __m512i *nbias) {
    const __m512i x = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(const void *)xb));
    *xs = _mm512_xor_si512(x, _mm512_set1_epi8((char)0x80));
    *nbias = _mm512_dpbusd_epi32(_mm512_set1_epi32(KVT_Q8_GROUP * KVT_Q8_ACT_BIAS * KVT_Q8_ACT_BIAS), x,
                                 _mm512_set1_epi8((char)-KVT_Q8_ACT_BIAS));
}

/* Q8_0 "lanes" decode tile (1 to 4 tokens, QLDRM rows as pairs): the bits of
 * tile_q8l with fewer operations per block, since decode runs it over every
 * weight, and with several sequences decoding at once, every weight loaded
 * serves all their tokens. The weights, flipped to u8 (w + 128), take VNNI's
 * unsigned operand and the activations, as s8, the signed one, so the bias
 * term depends on the token only: the accumulator starts at -128 * sum(q) per
 * group, formed once per block for all rows (dpbusd of 4 * 128 * 128 and
 * (q + 128) by -128, exact in int32), and sum((w + 128) * q) - 128 * sum(q) =
 * sum(w * q) exactly. The rows' f16 scales are converted by one instruction.
 * Each lane's scale is the one f32 product d_w * d_x of tile_q8l: with 1 or
 * 2 tokens it is formed once per token for the 8 rows and spread to the
 * pairs by a permute; with 3 or 4 the scales are spread to the pairs once and
 * each pair multiplies by the token's d_x (fewer registers live, the same
 * products). More rows per tile also keeps more prefetches in flight. */
#define QLDRM 8
#define QLDRN 4
INLINE512 void tile_q8l_dec(const uint8_t *const *wr, const uint8_t *const *xq, const float *const *xd, int rn,
                            int64_t k, float *out) {
    const int64_t nb = k / KVT_Q8_0_BLOCK;
    __m512i spread[QLDRM / 2]; /* lanes 0-7 take scale 2p, lanes 8-15 scale 2p + 1 */
    _Pragma("GCC unroll 8") for (int p = 0; p < QLDRM / 2; p++)
        spread[p] = _mm512_inserti64x4(_mm512_set1_epi32(2 * p), _mm256_set1_epi32(2 * p + 1), 1);
    __m512 acc[QLDRM / 2][QLDRN];
    _Pragma("GCC unroll 8") for (int p = 0; p < QLDRM / 2; p++) _Pragma("GCC unroll 8") for (int j = 0; j < rn; j++)
        acc[p][j] = _mm512_setzero_ps();
    const ptrdiff_t pf_ahead = (wr[1] - wr[0]) * QLDRM * KVT_PF_TILES; /* the same place KVT_PF_TILES tiles on */
    for (int64_t b = 0; b < nb; b++) {
        const int64_t off = b * KVT_Q8_0_BYTES;
        __m128i h = _mm_cvtsi32_si128(kvt_load_u16(wr[0] + off));
        _Pragma("GCC unroll 8") for (int i = 1; i < QLDRM; i++) h = _mm_insert_epi16(h, kvt_load_u16(wr[i] + off), i);
        const __m256 dw = _mm256_cvtph_ps(h);
        __m512i xs[QLDRN], nbias[QLDRN];
        __m256 dwx[QLDRN];
        __m512 dwp[QLDRM / 2]; /* with 3 or 4 tokens: the pairs' d_w, spread */
        _Pragma("GCC unroll 8") for (int j = 0; j < rn; j++) {
            q8_token_s8(xq[j] + b * KVT_Q8_0_BLOCK, &xs[j], &nbias[j]);
            if (rn <= 2) dwx[j] = _mm256_mul_ps(dw, _mm256_set1_ps(xd[j][b]));
        }
        if (rn > 2)
            _Pragma("GCC unroll 8") for (int p = 0; p < QLDRM / 2; p++)
                dwp[p] = _mm512_permutexvar_ps(spread[p], _mm512_castps256_ps512(dw));
        _Pragma("GCC unroll 8") for (int p = 0; p < QLDRM / 2; p++) {
            const uint8_t *b0 = wr[2 * p] + off, *b1 = wr[2 * p + 1] + off;
            KVT_PREFETCH_WEIGHTS(b0 + pf_ahead);
            KVT_PREFETCH_WEIGHTS(b1 + pf_ahead);
            const __m512i wu = q8_pair_u8(b0, b1);
            _Pragma("GCC unroll 8") for (int j = 0; j < rn; j++) {
                const __m512 isum = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(nbias[j], wu, xs[j]));
                const __m512 scale = rn <= 2 ? _mm512_permutexvar_ps(spread[p], _mm512_castps256_ps512(dwx[j]))
                                             : _mm512_mul_ps(dwp[p], _mm512_set1_ps(xd[j][b]));
                acc[p][j] = _mm512_fmadd_ps(isum, scale, acc[p][j]);
            }
        }
    }
    _Pragma("GCC unroll 8") for (int p = 0; p < QLDRM / 2; p++) _Pragma("GCC unroll 8") for (int j = 0; j < rn; j++) {
        out[2 * p * rn + j] = hsum8(_mm512_castps512_ps256(acc[p][j]));
        out[(2 * p + 1) * rn + j] = hsum8(_mm512_extractf32x8_ps(acc[p][j], 1));
    }
}

/* Q8_0 "block" tile: QRM = 16 rows x up to QRN tokens, one block per step,
 * on the decode tile's flipped operands (q8_pair_u8, q8_token_s8). A zmm
 * holds two rows' 8 group sums; q8_rowsums adds them up to the 16 rows'
 * block integers in one zmm, so that one fma steps 16 outputs (lane = row)
 * through the block as ops.h's Q8_0 dot does. The rows' f16 scales come in
 * by one gather. In decode steps (pf: up to QLD_MAX_N tokens, which stream
 * every weight once) the same place KVT_PF_TILES tiles on is prefetched. */
#define QRM 16
#define QRN 4

/* The block integers of 16 rows (lane i = row i) from their group sums,
 * d[p] holding rows 2p (lanes 0-7) and 2p + 1 (lanes 8-15): three rounds of
 * adding neighbouring lanes of two vectors, exact in int32. */
INLINE512 __m512i q8_rowsums(const __m512i d[8]) {
    const __m512i ev = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    const __m512i od = _mm512_add_epi32(ev, _mm512_set1_epi32(1));
#define Q8_PAIR(a, b) _mm512_add_epi32(_mm512_permutex2var_epi32(a, ev, b), _mm512_permutex2var_epi32(a, od, b))
    const __m512i e0 = Q8_PAIR(d[0], d[1]), e1 = Q8_PAIR(d[2], d[3]), e2 = Q8_PAIR(d[4], d[5]), e3 = Q8_PAIR(d[6], d[7]);
    const __m512i f0 = Q8_PAIR(e0, e1), f1 = Q8_PAIR(e2, e3);
    return Q8_PAIR(f0, f1);
#undef Q8_PAIR
}

INLINE512 void tile_q8(const uint8_t *const *wr, const uint8_t *const *xq, const float *const *xd, int rn, int pf,
                       int64_t k, float *out) {
    const int64_t nb = k / KVT_Q8_0_BLOCK;
    _Alignas(64) int32_t roff[QRM]; /* rows from the first, for the scale gather (within 16 rows) */
    for (int i = 0; i < QRM; i++) roff[i] = (int32_t)(wr[i] - wr[0]);
    const __m512i rows = _mm512_load_si512(roff);
    __m512 acc[QRN];
    _Pragma("GCC unroll 8") for (int j = 0; j < rn; j++) acc[j] = _mm512_setzero_ps();
    const ptrdiff_t pf_ahead = (wr[1] - wr[0]) * QRM * KVT_PF_TILES;
    for (int64_t b = 0; b < nb; b++) {
        const int64_t off = b * KVT_Q8_0_BYTES;
        const __m512 dw = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_i32gather_epi32(rows, wr[0] + off, 1)));
        __m512i wu[QRM / 2];
        _Pragma("GCC unroll 8") for (int p = 0; p < QRM / 2; p++) {
            const uint8_t *b0 = wr[2 * p] + off, *b1 = wr[2 * p + 1] + off;
            if (pf) {
                KVT_PREFETCH_WEIGHTS(b0 + pf_ahead);
                KVT_PREFETCH_WEIGHTS(b1 + pf_ahead);
            }
            wu[p] = q8_pair_u8(b0, b1);
        }
        _Pragma("GCC unroll 8") for (int j = 0; j < rn; j++) {
            __m512i xs, nbias, d[QRM / 2];
            q8_token_s8(xq[j] + b * KVT_Q8_0_BLOCK, &xs, &nbias);
            _Pragma("GCC unroll 8") for (int p = 0; p < QRM / 2; p++) d[p] = _mm512_dpbusd_epi32(nbias, wu[p], xs);
            acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(q8_rowsums(d)), _mm512_mul_ps(dw, _mm512_set1_ps(xd[j][b])),
                                     acc[j]);
        }
    }
    _Pragma("GCC unroll 8") for (int j = 0; j < rn; j++) {
        _Alignas(64) float o[QRM];
        _mm512_store_ps(o, acc[j]);
        for (int i = 0; i < QRM; i++) out[i * rn + j] = o[i];
    }
}

/* The micro-kernels as ops_tileloop.h's tiles: the token count picks a fully
 * unrolled instance. */
#define DEF_TILE_FN(NAME, CALL) \
    static T512 void NAME(const uint8_t *const *wr, const kvt_tile_x *x, int n, int64_t k, float *out) { \
        KVT_TILE_BY_N6(CALL) \
    }
#define CALL_F32(N) tile_f32(wr, x->xf, RM, N, k, out)
#define CALL_F16(N) tile_f16(wr, x->xf, RM, N, k, out)
#define CALL_BF16(N) tile_bf16(wr, x->xf, RM, N, k, out)
#define CALL_Q8(N) tile_q8(wr, x->xq, x->xd, N, 0, k, out)
#define CALL_Q8_DEC(N) tile_q8(wr, x->xq, x->xd, N, 1, k, out)
DEF_TILE_FN(ft_f32, CALL_F32)
DEF_TILE_FN(ft_f16, CALL_F16)
DEF_TILE_FN(ft_bf16, CALL_BF16)
#define CALL_Q8L(N) tile_q8l(wr, x->xq, x->xd, QLRM, N, k, out)
DEF_TILE_FN(ft_q8l, CALL_Q8L)
#define CALL_Q8L_DEC(N) tile_q8l_dec(wr, x->xq, x->xd, N, k, out)
static T512 void ft_q8l_dec(const uint8_t *const *wr, const kvt_tile_x *x, int n, int64_t k, float *out) {
    KVT_TILE_BY_N4(CALL_Q8L_DEC)
}
static T512 void ft_q8(const uint8_t *const *wr, const kvt_tile_x *x, int n, int64_t k, float *out) {
    KVT_TILE_BY_N4(CALL_Q8)
}
static T512 void ft_q8_dec(const uint8_t *const *wr, const kvt_tile_x *x, int n, int64_t k,
                           float *out){KVT_TILE_BY_N4(CALL_Q8_DEC)}

/* F16/BF16 rows widened to f32 (exact), for the loop's widening (ops_tileloop.h). */
INLINE512 void widen_row(const uint8_t *row, int64_t k, float *dst, const int bf16) {
    int64_t kk = 0;
    for (; kk + V <= k; kk += V) _mm512_store_ps(dst + kk, bf16 ? ldw_bf16(row, kk) : ldw_f16(row, kk));
    if (kk < k) {
        const __mmask16 m = (__mmask16)((1u << (k - kk)) - 1);
        _mm512_store_ps(dst + kk, bf16 ? ldw_bf16_m(row, kk, m) : ldw_f16_m(row, kk, m));
    }
}
static T512 void widen_f16(const uint8_t *row, int64_t k, float *dst) { widen_row(row, k, dst, 0); }
static T512 void widen_bf16(const uint8_t *row, int64_t k, float *dst) { widen_row(row, k, dst, 1); }

KVT_DEFINE_MM_ROWS(mm_rows_lanes, T512, widen_f16, widen_bf16, ft_q8l, QLRM, QLRN, ft_q8l_dec, QLDRM, QLDRN)

/* Q8_0 "lanes" steps of up to this many tokens (several sequences decoding
 * at once) run the decode tiles in groups of QLDRN tokens: each row group's
 * weights come from memory once and serve every group from L1, which costs
 * less than the 16-token vectors of kvt_q8l_mm_avx512 up to about 16 tokens. */
#define QLD_MAX_N 15

/* Q8_0 weights in the order selected (ops.h); every other type as mm_rows_lanes. */
static T512 void mm_rows(const kvt_wmat *w, const kvt_acts *a, int64_t r0, int64_t r1, float *y, int64_t ldy) {
    if (w->type == KVT_TYPE_Q8_0 && !kvt_ops_q8_block() && a->n <= QLD_MAX_N) {
        kvt_tile_loop(w, a, r0, r1, y, ldy, (kvt_tiling){.rm = QLDRM, .rn = QLDRN, .q8 = 1, .tile = ft_q8l_dec});
        return;
    }
    if (w->type != KVT_TYPE_Q8_0 || !kvt_ops_q8_block()) {
        const int64_t done = kvt_q8l_mm_avx512(w, a, r0, r1, y, ldy);
        if (r0 + done < r1) mm_rows_lanes(w, a, r0 + done, r1, y, ldy);
        return;
    }
    if (a->n <= QLD_MAX_N)
        kvt_tile_loop(w, a, r0, r1, y, ldy, (kvt_tiling){.rm = QRM, .rn = QRN, .q8 = 1, .tile = ft_q8_dec});
    else kvt_tile_loop(w, a, r0, r1, y, ldy, (kvt_tiling){.rm = QRM, .rn = QRN, .q8 = 1, .tile = ft_q8});
}

/* "amx": Q8_0 prefill ("block" order) on tiles for whole groups of 16 rows, the rest here. */
static T512 void mm_rows_amx(const kvt_wmat *w, const kvt_acts *a, int64_t r0, int64_t r1, float *y, int64_t ldy) {
    const int64_t done = kvt_q8_mm_amx(w, a, r0, r1, y, ldy);
    if (r0 + done < r1) mm_rows(w, a, r0 + done, r1, y, ldy);
}

/* ---- vector ops ---------------------------------------------------------- */

INLINE512 __mmask16 tail_mask(int64_t left) { return (__mmask16)((1u << left) - 1); }

static T512 float dot_f32(const float *a, const float *b, int64_t n) {
    __m512 acc = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + V <= n; i += V) acc = _mm512_fmadd_ps(_mm512_loadu_ps(b + i), _mm512_loadu_ps(a + i), acc);
    if (i < n) {
        __mmask16 m = tail_mask(n - i);
        acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, b + i), _mm512_maskz_loadu_ps(m, a + i), acc);
    }
    return hsum16(acc);
}

static T512 float dot_f32_f16(const float *a, const uint16_t *b, int64_t n) {
    __m512 acc = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + V <= n; i += V) acc = _mm512_fmadd_ps(ldw_f16((const uint8_t *)b, i), _mm512_loadu_ps(a + i), acc);
    if (i < n) {
        __mmask16 m = tail_mask(n - i);
        acc = _mm512_fmadd_ps(ldw_f16_m((const uint8_t *)b, i, m), _mm512_maskz_loadu_ps(m, a + i), acc);
    }
    return hsum16(acc);
}

static T512 void axpy_f32(float *y, float a, const float *x, int64_t n) {
    const __m512 av = _mm512_set1_ps(a);
    int64_t i = 0;
    for (; i + V <= n; i += V)
        _mm512_storeu_ps(y + i, _mm512_fmadd_ps(av, _mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i)));
    if (i < n) {
        __mmask16 m = tail_mask(n - i);
        _mm512_mask_storeu_ps(y + i, m,
                              _mm512_fmadd_ps(av, _mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, y + i)));
    }
}

static T512 void axpy_f16(float *y, float a, const uint16_t *x, int64_t n) {
    const __m512 av = _mm512_set1_ps(a);
    int64_t i = 0;
    for (; i + V <= n; i += V)
        _mm512_storeu_ps(y + i, _mm512_fmadd_ps(av, ldw_f16((const uint8_t *)x, i), _mm512_loadu_ps(y + i)));
    if (i < n) {
        __mmask16 m = tail_mask(n - i);
        _mm512_mask_storeu_ps(
            y + i, m, _mm512_fmadd_ps(av, ldw_f16_m((const uint8_t *)x, i, m), _mm512_maskz_loadu_ps(m, y + i)));
    }
}

static T512 void f32_to_f16_row(const float *x, uint16_t *y, int64_t n) {
    int64_t i = 0;
    for (; i + V <= n; i += V)
        _mm256_storeu_si256((__m256i *)(void *)(y + i),
                            _mm512_cvtps_ph(_mm512_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
    if (i < n) {
        __mmask16 m = tail_mask(n - i);
        _mm256_mask_storeu_epi16(y + i, m, _mm512_cvtps_ph(_mm512_maskz_loadu_ps(m, x + i), _MM_FROUND_TO_NEAREST_INT));
    }
}

static T512 void f16_to_f32_row(const uint16_t *x, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + V <= n; i += V) _mm512_storeu_ps(y + i, ldw_f16((const uint8_t *)x, i));
    if (i < n) {
        __mmask16 m = tail_mask(n - i);
        _mm512_mask_storeu_ps(y + i, m, ldw_f16_m((const uint8_t *)x, i, m));
    }
}

INLINE512 __m512 round_f16(__m512 v) { return _mm512_cvtph_ps(_mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT)); }

/* bf16 round to nearest even with NaN kept quiet, as kvt_f32_to_bf16. */
INLINE512 __m512 round_bf16(__m512 v) {
    const __m512i u = _mm512_castps_si512(v);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb);
    __m512i nan = _mm512_or_si512(u, _mm512_set1_epi32(0x00400000));
    __mmask16 isnan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    r = _mm512_mask_mov_epi32(r, isnan, nan);
    return _mm512_castsi512_ps(_mm512_and_si512(r, _mm512_set1_epi32((int)0xffff0000u)));
}

/* y = x rounded to f16 (bf16 = 0) or bf16 (bf16 = 1) and back. */
INLINE512 void round_row(const float *x, float *y, int64_t n, const int bf16) {
    int64_t i = 0;
    for (; i + V <= n; i += V) {
        const __m512 v = _mm512_loadu_ps(x + i);
        _mm512_storeu_ps(y + i, bf16 ? round_bf16(v) : round_f16(v));
    }
    if (i < n) {
        __mmask16 m = tail_mask(n - i);
        const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
        _mm512_mask_storeu_ps(y + i, m, bf16 ? round_bf16(v) : round_f16(v));
    }
}
static T512 void round_f16_row(const float *x, float *y, int64_t n) { round_row(x, y, n, 0); }
static T512 void round_bf16_row(const float *x, float *y, int64_t n) { round_row(x, y, n, 1); }

/* Q8_0/Q8_1 activations, the bits of ops.c's sc_quantize_q8_row: max(|v|, m)
 * keeps m where |v| is NaN, as fmaxf(m, |v|) does; cvtps rounds in the
 * current mode (ties to even), as nearbyintf; NaN and overflow give INT_MIN,
 * as the scalar cast does; vpmovdb truncates, as the (uint8_t) cast. */
static T512 void quantize_q8_row(const float *x, int64_t k, uint8_t *q, float *d, float *s) {
    const __m512i bias = _mm512_set1_epi32(KVT_Q8_ACT_BIAS);
    for (int64_t b = 0; b < k / KVT_Q8_0_BLOCK; b++) {
        const float *xb = x + b * KVT_Q8_0_BLOCK;
        const __m512 v0 = _mm512_loadu_ps(xb), v1 = _mm512_loadu_ps(xb + V);
        const __m512 m = _mm512_max_ps(_mm512_abs_ps(v1), _mm512_max_ps(_mm512_abs_ps(v0), _mm512_setzero_ps()));
        const float amax = _mm512_reduce_max_ps(m);
        const float db = amax / KVT_Q8_MAX, id = amax != 0.0f ? KVT_Q8_MAX / amax : 0.0f;
        d[b] = kvt_f16_to_f32(kvt_f32_to_f16(db));
        const __m512 idv = _mm512_set1_ps(id);
        const __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, idv)), q1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, idv));
        _mm_storeu_si128((__m128i *)(void *)(q + b * KVT_Q8_0_BLOCK), _mm512_cvtepi32_epi8(_mm512_add_epi32(q0, bias)));
        _mm_storeu_si128((__m128i *)(void *)(q + b * KVT_Q8_0_BLOCK + V),
                         _mm512_cvtepi32_epi8(_mm512_add_epi32(q1, bias)));
        if (s) s[b] = kvt_f16_to_f32(kvt_f32_to_f16((float)_mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1)) * db));
    }
}

/* Q8_K activations, the bits of quant_k.c's kvt_qk_quantize_acts: the value
 * of largest magnitude is the first whose |x| equals the maximum (max(|v|, m)
 * skips NaN as the scalar > does), q is its magic-number rounding on the
 * same f32 product, capped at 127, and each group sum one reduction of 16. */
static T512 void quantize_q8k_row(const float *x, int64_t k, int8_t *q, float *d, int16_t *bsums) {
    for (int64_t blk = 0; blk < k / KVT_QK; blk++) {
        const float *xb = x + blk * KVT_QK;
        __m512 m = _mm512_setzero_ps();
        for (int i = 0; i < KVT_QK; i += V) m = _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(xb + i)), m);
        const float amax = _mm512_reduce_max_ps(m);
        if (amax == 0.0f) {
            d[blk] = 0.0f;
            memset(q + blk * KVT_QK, 0, KVT_QK);
            memset(bsums + blk * KVT_QK_NGROUP, 0, KVT_QK_NGROUP * sizeof *bsums);
            continue;
        }
        float mx = 0.0f;
        for (int i = 0; i < KVT_QK; i += V) {
            const __mmask16 hit = _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_loadu_ps(xb + i)), _mm512_set1_ps(amax),
                                                     _CMP_EQ_OQ);
            if (hit) {
                mx = xb[i + __builtin_ctz(hit)];
                break;
            }
        }
        const float iscale = -(float)KVT_Q8K_MAX / mx;
        const __m512 vs = _mm512_set1_ps(iscale), magic = _mm512_set1_ps(KVT_QK_ROUND_MAGIC);
        for (int g = 0; g < KVT_QK_NGROUP; g++) { /* a group is one vector */
            const __m512 v = _mm512_add_ps(_mm512_mul_ps(vs, _mm512_loadu_ps(xb + g * KVT_QK_GROUP)), magic);
            __m512i r = _mm512_sub_epi32(_mm512_and_si512(_mm512_castps_si512(v), _mm512_set1_epi32(KVT_QK_ROUND_MANT)),
                                         _mm512_set1_epi32(KVT_QK_ROUND_HALF));
            r = _mm512_min_epi32(r, _mm512_set1_epi32(KVT_Q8K_MAX));
            _mm_storeu_si128((__m128i *)(void *)(q + blk * KVT_QK + g * KVT_QK_GROUP), _mm512_cvtepi32_epi8(r));
            bsums[blk * KVT_QK_NGROUP + g] = (int16_t)_mm512_reduce_add_epi32(r);
        }
        d[blk] = 1.0f / iscale;
    }
}

/* The vector exp (ops_impl.h), lane for lane as ops.c's kvt_ops_vexpf. */
INLINE512 __m512 vexp16(__m512 x) {
    const __m512 sh = _mm512_set1_ps(KVT_SEXP_SHIFT);
    __m512 n = _mm512_sub_ps(_mm512_fmadd_ps(x, _mm512_set1_ps(KVT_SEXP_LOG2E), sh), sh);
    __m512 b = _mm512_fnmadd_ps(n, _mm512_set1_ps(KVT_SEXP_LN2_HI), x);
    b = _mm512_fnmadd_ps(n, _mm512_set1_ps(KVT_SEXP_LN2_LO), b);
    __m512 u = _mm512_mul_ps(b, b);
    __m512 hi = _mm512_fmadd_ps(_mm512_set1_ps(KVT_SEXP_P5), b, _mm512_set1_ps(KVT_SEXP_P4));
    __m512 mid = _mm512_fmadd_ps(_mm512_set1_ps(KVT_SEXP_P3), b, _mm512_set1_ps(KVT_SEXP_P2));
    __m512 lo = _mm512_fmadd_ps(_mm512_set1_ps(KVT_SEXP_P1), b, _mm512_set1_ps(1.0f));
    __m512 j = _mm512_fmadd_ps(_mm512_fmadd_ps(hi, u, mid), u, lo);
    __m512 r = _mm512_scalef_ps(j, n);
    __mmask16 big = _mm512_cmp_ps_mask(_mm512_abs_ps(n), _mm512_set1_ps(KVT_SEXP_NMAX), _CMP_GT_OQ);
    if (!big) return r;
    __mmask16 neg = _mm512_cmp_ps_mask(n, _mm512_setzero_ps(), _CMP_LE_OQ);
    return _mm512_mask_blend_ps(big, r, _mm512_mask_blend_ps(neg, _mm512_set1_ps(INFINITY), _mm512_setzero_ps()));
}

static T512 double exp_sum(float *x, float m, int64_t n, int ph) {
    const __m512 mv = _mm512_set1_ps(m);
    double sum = 0.0;
    for (int64_t i = 0; i < n; ph = 0) { /* lanes ph .. ph+c-1 hold x[i .. i+c-1] */
        const int64_t c = n - i < V - ph ? n - i : V - ph;
        if (c == V) { /* a whole chunk in place: plain loads and stores (the compressing store is slow) */
            const __m512 e = vexp16(_mm512_sub_ps(_mm512_loadu_ps(x + i), mv));
            _mm512_storeu_ps(x + i, e);
            sum += (double)hsum16(e);
            i += V;
            continue;
        }
        const __mmask16 mk = (__mmask16)(tail_mask(c) << ph);
        __m512 e = _mm512_maskz_mov_ps(mk, vexp16(_mm512_sub_ps(_mm512_maskz_expandloadu_ps(mk, x + i), mv)));
        _mm512_mask_compressstoreu_ps(x + i, mk, e);
        sum += (double)hsum16(e);
        i += c;
    }
    return sum;
}

INLINE512 void scale_row_as(float *x, int64_t n, float s, const int f16) {
    const __m512 vs = _mm512_set1_ps(s);
    int64_t i = 0;
    for (; i + V <= n; i += V) {
        const __m512 v = _mm512_mul_ps(_mm512_loadu_ps(x + i), vs);
        _mm512_storeu_ps(x + i, f16 ? round_f16(v) : v);
    }
    if (i < n) {
        const __mmask16 m = tail_mask(n - i);
        const __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), vs);
        _mm512_mask_storeu_ps(x + i, m, f16 ? round_f16(v) : v);
    }
}

static T512 void scale_row(float *x, int64_t n, float s, int f16) {
    if (f16) scale_row_as(x, n, s, 1);
    else scale_row_as(x, n, s, 0);
}

static T512 float vmax(const float *x, int64_t n) {
    float m = x[0];
    int64_t i = 0;
    if (n >= V) {
        __m512 mv = _mm512_loadu_ps(x);
        for (i = V; i + V <= n; i += V) mv = _mm512_max_ps(mv, _mm512_loadu_ps(x + i));
        m = _mm512_reduce_max_ps(mv);
    }
    for (; i < n; i++) m = x[i] > m ? x[i] : m;
    return m;
}

static T512 void silu_mul(float *gate, const float *up, int64_t n) {
    int64_t i = 0;
    const __m512 one = _mm512_set1_ps(1.0f);
    for (; i + V <= n; i += V) {
        __m512 g = _mm512_loadu_ps(gate + i);
        __m512 s = _mm512_div_ps(g, _mm512_add_ps(one, vexp16(_mm512_sub_ps(_mm512_setzero_ps(), g))));
        _mm512_storeu_ps(gate + i, _mm512_mul_ps(s, _mm512_loadu_ps(up + i)));
    }
    if (i < n) {
        __mmask16 m = tail_mask(n - i);
        __m512 g = _mm512_maskz_loadu_ps(m, gate + i);
        __m512 s = _mm512_div_ps(g, _mm512_add_ps(one, vexp16(_mm512_sub_ps(_mm512_setzero_ps(), g))));
        _mm512_mask_storeu_ps(gate + i, m, _mm512_mul_ps(s, _mm512_maskz_loadu_ps(m, up + i)));
    }
}

/* The AVX-512 table; "amx" differs only in its Q8_0 and K-quant matmuls
 * (ops_q8_amx.c, ops_k_x86.c: prefill on AMX tiles, the same bits). */
#define AVX512_TABLE(NAME, MATMUL, MATMUL_K) \
    { \
        .name = NAME, .matmul_rows = MATMUL, .matmul_k_rows = MATMUL_K, .matmul_ql_rows = kvt_ql_mm_avx512, \
        .quantize_q8_row = quantize_q8_row, .quantize_q8k_row = quantize_q8k_row, .dot_f32 = dot_f32, \
        .dot_f32_f16 = dot_f32_f16, .axpy_f32 = axpy_f32, .axpy_f16 = axpy_f16, .f32_to_f16_row = f32_to_f16_row, \
        .f16_to_f32_row = f16_to_f32_row, .round_f16_row = round_f16_row, .round_bf16_row = round_bf16_row, \
        .exp_sum = exp_sum, .max = vmax, .scale_row = scale_row, .silu_mul = silu_mul, .attn_qk = kvt_attn_qk_avx512, \
        .attn_av = kvt_attn_av_avx512, .kv_q8_dequant_rows = kvt_kv_q8_dequant_rows_avx512, \
        .kv_q8_dequant_columns = kvt_kv_q8_dequant_columns_avx512, \
    }

static const kvt_ops_vtable ops_avx512 = AVX512_TABLE("avx512", mm_rows, kvt_qk_mm_avx512);
static const kvt_ops_vtable ops_amx = AVX512_TABLE("amx", mm_rows_amx, kvt_qk_mm_amx);

const kvt_ops_vtable *kvt_ops_avx512(void) {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("fma") &&
        kvt_cpu_has_f16c())
        return &ops_avx512;
    return NULL;
}

const kvt_ops_vtable *kvt_ops_amx(void) { return kvt_ops_avx512() && kvt_cpu_has_amx() ? &ops_amx : NULL; }
