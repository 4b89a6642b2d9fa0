// SPDX-License-Identifier: MIT
/* AVX2 + FMA + F16C variant of the kernels, for x86-64 CPUs without AVX-512.
 * The canonical 16-lane accumulator (ops.h) is a pair of ymm registers (lanes
 * 0-7, 8-15), so the bits equal the scalar and AVX-512 variants'. Fewer
 * registers than AVX-512 means smaller tiles; the tiling loop is the same one
 * (ops_tileloop.h). */
#include <immintrin.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "ops_impl.h"
#include "quant_k.h"
#include "ops_tileloop.h"

#define T2 __attribute__((target("avx2,fma,f16c")))
#define INLINE2 static inline __attribute__((always_inline)) T2

/* Float tile: 2 rows x 3 tokens x 2 halves = 12 accumulators + 2 W halves + x. */
#define RM 2
#define RN 3
/* Q8_0 tile: 2 rows x 2 tokens, the 4 outputs in the lanes of one xmm. */
#define QRM 2
#define QRN 2
#define QDRM 8 /* Q8_0 lanes decode (1-2 tokens): rows per tile, so more weight streams are in flight */
#define V 16   /* canonical lanes */
#define H 8    /* lanes per ymm */

typedef struct {
    __m256 lo, hi;
} v16;

/* The 8-lane tree (the "lanes" Q8_0 dot's; the last rounds of the 16-lane one), and the 16-lane tree. */
INLINE2 float hsum8(__m256 s8) {
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));
}
INLINE2 float hsum16(v16 v) { return hsum8(_mm256_add_ps(v.lo, v.hi)); }

INLINE2 v16 fma16(v16 a, v16 b, v16 c) {
    return (v16){_mm256_fmadd_ps(a.lo, b.lo, c.lo), _mm256_fmadd_ps(a.hi, b.hi, c.hi)};
}
INLINE2 v16 load16(const float *p) { return (v16){_mm256_loadu_ps(p), _mm256_loadu_ps(p + H)}; }
INLINE2 v16 zero16(void) { return (v16){_mm256_setzero_ps(), _mm256_setzero_ps()}; }
INLINE2 __m256 cvt_f16(const uint8_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)p)); }
INLINE2 __m256 cvt_bf16(const uint8_t *p) {
    __m256i u = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(const void *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(u, 16));
}
INLINE2 v16 ldw_f32(const uint8_t *row, int64_t k) { return load16((const float *)(const void *)(row + 4 * k)); }
INLINE2 v16 ldw_f16(const uint8_t *row, int64_t k) { return (v16){cvt_f16(row + 2 * k), cvt_f16(row + 2 * k + 2 * H)}; }
INLINE2 v16 ldw_bf16(const uint8_t *row, int64_t k) {
    return (v16){cvt_bf16(row + 2 * k), cvt_bf16(row + 2 * k + 2 * H)};
}

/* The last partial vector of a row: copy the `left` valid elements into a
 * zeroed buffer, then load as usual (no reads past the row). */
INLINE2 v16 ldw_tail(v16 (*ld)(const uint8_t *, int64_t), const uint8_t *row, int64_t k, int64_t left, size_t elem) {
    uint8_t buf[V * sizeof(float)] = {0};
    memcpy(buf, row + (size_t)k * elem, (size_t)left * elem);
    return ld(buf, 0);
}

#define DEF_TILE(NAME, LDW, ELEM) \
    INLINE2 void NAME(const uint8_t *const *wr, const float *const *xr, int rm, int rn, int64_t k, float *out) { \
        v16 acc[RM][RN]; \
        _Pragma("GCC unroll 8") for (int i = 0; i < rm; i++) _Pragma("GCC unroll 8") for (int j = 0; j < rn; j++) \
            acc[i][j] = zero16(); \
        for (int64_t kk = 0; kk < k; kk += V) { \
            v16 wv[RM]; \
            if (kk + V <= k) { \
                _Pragma("GCC unroll 8") for (int i = 0; i < rm; i++) wv[i] = LDW(wr[i], kk); \
            } else { \
                _Pragma("GCC unroll 8") for (int i = 0; i < rm; i++) wv[i] = ldw_tail(LDW, wr[i], kk, k - kk, ELEM); \
            } \
            _Pragma("GCC unroll 8") for (int j = 0; j < rn; j++) { \
                v16 xv = load16(xr[j] + kk); /* zero padded past k */ \
                _Pragma("GCC unroll 8") for (int i = 0; i < rm; i++) acc[i][j] = fma16(wv[i], xv, acc[i][j]); \
            } \
        } \
        _Pragma("GCC unroll 8") for (int i = 0; i < rm; i++) _Pragma("GCC unroll 8") for (int j = 0; j < rn; j++) \
            out[i * rn + j] = hsum16(acc[i][j]); \
    }

DEF_TILE(tile_f32, ldw_f32, sizeof(float))
DEF_TILE(tile_f16, ldw_f16, sizeof(uint16_t))
DEF_TILE(tile_bf16, ldw_bf16, sizeof(uint16_t))

/* The 8 sums of each 4 products of one Q8_0 block, group j in lane j, from
 * the weights w (s8) and the activations xs as s8 (xq xor 0x80): maddubs of
 * |w| and xs with w's sign (exact: |w| * |xs| * 2 <= 128 * 127 * 2 < 2^15),
 * then pairs of those added by madd. */
INLINE2 __m256i q8_block_sums(__m256i w, __m256i xs) {
    const __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(xs, w));
    return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
}
INLINE2 __m256i q8_sums_at(const uint8_t *wq, const uint8_t *xq) {
    const __m256i w = _mm256_loadu_si256((const __m256i *)(const void *)wq);
    const __m256i xs = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(const void *)xq),
                                        _mm256_set1_epi8((char)0x80));
    return q8_block_sums(w, xs);
}

/* Q8_0, "lanes" order (ops.h): rm rows (QRM, or QDRM for decode) x up to 2
 * tokens, lane j of each output's accumulator taking group j of every block. */
INLINE2 void tile_q8l(const uint8_t *const *wr, const uint8_t *const *xq, const float *const *xd, int rm, int rn,
                      int64_t k, float *out) {
    const int64_t nb = k / KVT_Q8_0_BLOCK;
    __m256 acc[QDRM][QRN];
    _Pragma("GCC unroll 8") for (int i = 0; i < rm; i++) _Pragma("GCC unroll 8") for (int j = 0; j < rn; j++)
        acc[i][j] = _mm256_setzero_ps();
    /* decode streams each weight once: prefetch the same place KVT_PF_TILES
     * tiles on (a hint; a clamped tail row makes it a harmless re-read) */
    const ptrdiff_t pf_ahead = (wr[1] - wr[0]) * rm * KVT_PF_TILES;
    for (int64_t b = 0; b < nb; b += 2) {
        _Pragma("GCC unroll 8") for (int i = 0; i < rm; i++) {
            const uint8_t *blk = wr[i] + b * KVT_Q8_0_BYTES;
            KVT_PREFETCH_WEIGHTS(blk + pf_ahead); /* 2 blocks: about one line */
            const float dlo = _cvtsh_ss(kvt_load_u16(blk));
            const float dhi = b + 1 < nb ? _cvtsh_ss(kvt_load_u16(blk + KVT_Q8_0_BYTES)) : 0.0f;
            _Pragma("GCC unroll 8") for (int j = 0; j < rn; j++) {
                const uint8_t *xb = xq[j] + b * KVT_Q8_0_BLOCK;
                __m256 plo = _mm256_cvtepi32_ps(q8_sums_at(blk + KVT_Q8_0_SCALE_BYTES, xb));
                acc[i][j] = _mm256_fmadd_ps(plo, _mm256_set1_ps(dlo * xd[j][b]), acc[i][j]);
                if (b + 1 < nb) {
                    __m256 phi = _mm256_cvtepi32_ps(
                        q8_sums_at(blk + KVT_Q8_0_BYTES + KVT_Q8_0_SCALE_BYTES, xb + KVT_Q8_0_BLOCK));
                    acc[i][j] = _mm256_fmadd_ps(phi, _mm256_set1_ps(dhi * xd[j][b + 1]), acc[i][j]);
                }
            }
        }
    }
    _Pragma("GCC unroll 8") for (int i = 0; i < rm; i++) _Pragma("GCC unroll 8") for (int j = 0; j < rn; j++)
        out[i * rn + j] = hsum8(acc[i][j]);
}

/* Q8_0 "block" tile: QRM (2) rows x rn (1 or 2) tokens, one block per step. The
 * block integers of the tile's outputs are added up from their group sums
 * into the lanes of one xmm (output i * rn + j in lane i * rn + j), so one
 * fma steps them all through the block as ops.h's Q8_0 dot does. */
INLINE2 void tile_q8(const uint8_t *const *wr, const uint8_t *const *xq, const float *const *xd, int rn, int64_t k,
                     float *out) {
    const int64_t nb = k / KVT_Q8_0_BLOCK;
    const __m256i flip = _mm256_set1_epi8((char)0x80);
    __m128 acc = _mm_setzero_ps();
    /* decode streams each weight once: prefetch the same place KVT_PF_TILES
     * tiles on (a hint; a clamped tail row makes it a harmless re-read) */
    const ptrdiff_t pf_ahead = (wr[1] - wr[0]) * QRM * KVT_PF_TILES;
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *b0 = wr[0] + b * KVT_Q8_0_BYTES, *b1 = wr[1] + b * KVT_Q8_0_BYTES;
        if (b % 2 == 0) { /* two blocks: about one line */
            KVT_PREFETCH_WEIGHTS(b0 + pf_ahead);
            KVT_PREFETCH_WEIGHTS(b1 + pf_ahead);
        }
        const float d0 = _cvtsh_ss(kvt_load_u16(b0)), d1 = _cvtsh_ss(kvt_load_u16(b1));
        const __m256i w0 = _mm256_loadu_si256((const __m256i *)(const void *)(b0 + KVT_Q8_0_SCALE_BYTES));
        const __m256i w1 = _mm256_loadu_si256((const __m256i *)(const void *)(b1 + KVT_Q8_0_SCALE_BYTES));
        const __m256i x0 = _mm256_xor_si256(
            _mm256_loadu_si256((const __m256i *)(const void *)(xq[0] + b * KVT_Q8_0_BLOCK)), flip);
        const __m256i s00 = q8_block_sums(w0, x0), s10 = q8_block_sums(w1, x0);
        __m256i h;
        __m128 scale;
        if (rn == 2) {
            const __m256i x1 = _mm256_xor_si256(
                _mm256_loadu_si256((const __m256i *)(const void *)(xq[1] + b * KVT_Q8_0_BLOCK)), flip);
            const __m256i s01 = q8_block_sums(w0, x1), s11 = q8_block_sums(w1, x1);
            h = _mm256_hadd_epi32(_mm256_hadd_epi32(s00, s01), _mm256_hadd_epi32(s10, s11));
            scale = _mm_set_ps(d1 * xd[1][b], d1 * xd[0][b], d0 * xd[1][b], d0 * xd[0][b]);
        } else {
            const __m256i h1 = _mm256_hadd_epi32(s00, s10);
            h = _mm256_hadd_epi32(h1, h1);
            scale = _mm_set_ps(0.0f, 0.0f, d1 * xd[0][b], d0 * xd[0][b]);
        }
        const __m128i isum = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
        acc = _mm_fmadd_ps(_mm_cvtepi32_ps(isum), scale, acc);
    }
    _Alignas(16) float o[4];
    _mm_store_ps(o, acc);
    for (int i = 0; i < QRM * rn; i++) out[i] = o[i];
}

/* The micro-kernels as ops_tileloop.h's tiles: the token count picks a fully
 * unrolled instance. */
#define DEF_TILE_FN(NAME, CALL) \
    static T2 void NAME(const uint8_t *const *wr, const kvt_tile_x *x, int n, int64_t k, float *out) { CALL }
#define CALL_F32(N) tile_f32(wr, x->xf, RM, N, k, out)
#define CALL_F16(N) tile_f16(wr, x->xf, RM, N, k, out)
#define CALL_BF16(N) tile_bf16(wr, x->xf, RM, N, k, out)
#define CALL_Q8(N) tile_q8(wr, x->xq, x->xd, N, k, out)
DEF_TILE_FN(ft_f32, KVT_TILE_BY_N3(CALL_F32))
DEF_TILE_FN(ft_f16, KVT_TILE_BY_N3(CALL_F16))
DEF_TILE_FN(ft_bf16, KVT_TILE_BY_N3(CALL_BF16))
DEF_TILE_FN(ft_q8, KVT_TILE_BY_N2(CALL_Q8))
#define CALL_Q8L(N) tile_q8l(wr, x->xq, x->xd, QRM, N, k, out)
DEF_TILE_FN(ft_q8l, KVT_TILE_BY_N2(CALL_Q8L))

#define CALL_Q8L_DEC(N) tile_q8l(wr, x->xq, x->xd, QDRM, N, k, out)
DEF_TILE_FN(ft_q8l_dec, KVT_TILE_BY_N2(CALL_Q8L_DEC))

KVT_DEFINE_MM_ROWS(mm_rows_lanes, T2, NULL, NULL, ft_q8l, QRM, QRN, ft_q8l_dec, QDRM, QRN)

/* Q8_0 weights in the order selected (ops.h); every other type as mm_rows_lanes. */
static T2 void mm_rows(const kvt_wmat *w, const kvt_acts *a, int64_t r0, int64_t r1, float *y, int64_t ldy) {
    if (w->type == KVT_TYPE_Q8_0 && kvt_ops_q8_block())
        kvt_tile_loop(w, a, r0, r1, y, ldy, (kvt_tiling){.rm = QRM, .rn = QRN, .q8 = 1, .tile = ft_q8});
    else mm_rows_lanes(w, a, r0, r1, y, ldy);
}

/* ---- vector ops ---------------------------------------------------------- */

/* Tail handling for the vector ops: stage the last partial vector through a
 * zeroed 16-float buffer (exact; lanes past n stay +0). */
static T2 float dot_f32(const float *a, const float *b, int64_t n) {
    v16 acc = zero16();
    int64_t i = 0;
    for (; i + V <= n; i += V) acc = fma16(load16(b + i), load16(a + i), acc);
    if (i < n) {
        float ta[V] = {0}, tb[V] = {0};
        memcpy(ta, a + i, (size_t)(n - i) * sizeof(float));
        memcpy(tb, b + i, (size_t)(n - i) * sizeof(float));
        acc = fma16(load16(tb), load16(ta), acc);
    }
    return hsum16(acc);
}

static T2 float dot_f32_f16(const float *a, const uint16_t *b, int64_t n) {
    v16 acc = zero16();
    int64_t i = 0;
    for (; i + V <= n; i += V) acc = fma16(ldw_f16((const uint8_t *)b, i), load16(a + i), acc);
    if (i < n) {
        float ta[V] = {0};
        uint16_t tb[V] = {0};
        memcpy(ta, a + i, (size_t)(n - i) * sizeof(float));
        memcpy(tb, b + i, (size_t)(n - i) * sizeof(uint16_t));
        acc = fma16(ldw_f16((const uint8_t *)tb, 0), load16(ta), acc);
    }
    return hsum16(acc);
}

static T2 void axpy_f32(float *y, float a, const float *x, int64_t n) {
    const __m256 av = _mm256_set1_ps(a);
    int64_t i = 0;
    for (; i + H <= n; i += H)
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; i++) y[i] = __builtin_fmaf(a, x[i], y[i]);
}

static T2 void axpy_f16(float *y, float a, const uint16_t *x, int64_t n) {
    const __m256 av = _mm256_set1_ps(a);
    int64_t i = 0;
    for (; i + H <= n; i += H)
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, cvt_f16((const uint8_t *)(x + i)), _mm256_loadu_ps(y + i)));
    for (; i < n; i++) y[i] = __builtin_fmaf(a, _cvtsh_ss(x[i]), y[i]);
}

static T2 void f32_to_f16_row(const float *x, uint16_t *y, int64_t n) {
    int64_t i = 0;
    for (; i + H <= n; i += H)
        _mm_storeu_si128((__m128i *)(void *)(y + i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) y[i] = _cvtss_sh(x[i], _MM_FROUND_TO_NEAREST_INT);
}

static T2 void f16_to_f32_row(const uint16_t *x, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + H <= n; i += H) _mm256_storeu_ps(y + i, cvt_f16((const uint8_t *)(x + i)));
    for (; i < n; i++) y[i] = _cvtsh_ss(x[i]);
}

static T2 void round_f16_row(const float *x, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + H <= n; i += H)
        _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT)));
    for (; i < n; i++) y[i] = _cvtsh_ss(_cvtss_sh(x[i], _MM_FROUND_TO_NEAREST_INT));
}

INLINE2 __m256 round_bf16(__m256 v) {
    const __m256i u = _mm256_castps_si256(v);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb);
    __m256i nan = _mm256_or_si256(u, _mm256_set1_epi32(0x00400000));
    __m256 isnan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
    r = _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(r), _mm256_castsi256_ps(nan), isnan));
    return _mm256_castsi256_ps(_mm256_and_si256(r, _mm256_set1_epi32((int)0xffff0000u)));
}

static T2 void round_bf16_row(const float *x, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + H <= n; i += H) _mm256_storeu_ps(y + i, round_bf16(_mm256_loadu_ps(x + i)));
    if (i < n) {
        float t[H] = {0};
        memcpy(t, x + i, (size_t)(n - i) * sizeof(float));
        _mm256_storeu_ps(t, round_bf16(_mm256_loadu_ps(t)));
        memcpy(y + i, t, (size_t)(n - i) * sizeof(float));
    }
}

/* The vector exp (ops_impl.h), lane for lane as ops.c's kvt_ops_vexpf: j * 2^n
 * as two exact-power products (the first exact), so one rounding as scalef. */
INLINE2 __m256 vexp8(__m256 x) {
    const __m256 sh = _mm256_set1_ps(KVT_SEXP_SHIFT);
    __m256 n = _mm256_sub_ps(_mm256_fmadd_ps(x, _mm256_set1_ps(KVT_SEXP_LOG2E), sh), sh);
    __m256 b = _mm256_fnmadd_ps(n, _mm256_set1_ps(KVT_SEXP_LN2_HI), x);
    b = _mm256_fnmadd_ps(n, _mm256_set1_ps(KVT_SEXP_LN2_LO), b);
    __m256 u = _mm256_mul_ps(b, b);
    __m256 hi = _mm256_fmadd_ps(_mm256_set1_ps(KVT_SEXP_P5), b, _mm256_set1_ps(KVT_SEXP_P4));
    __m256 mid = _mm256_fmadd_ps(_mm256_set1_ps(KVT_SEXP_P3), b, _mm256_set1_ps(KVT_SEXP_P2));
    __m256 lo = _mm256_fmadd_ps(_mm256_set1_ps(KVT_SEXP_P1), b, _mm256_set1_ps(1.0f));
    __m256 j = _mm256_fmadd_ps(_mm256_fmadd_ps(hi, u, mid), u, lo);
    const __m256 nmax = _mm256_set1_ps(KVT_SEXP_NMAX);
    __m256i ni = _mm256_cvtps_epi32(_mm256_max_ps(_mm256_min_ps(n, nmax), _mm256_sub_ps(_mm256_setzero_ps(), nmax)));
    __m256i n1 = _mm256_srai_epi32(ni, 1), n2 = _mm256_sub_epi32(ni, n1);
    const __m256i bias = _mm256_set1_epi32(KVT_F32_EXP_BIAS);
    __m256 p1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), KVT_F32_MANT_BITS));
    __m256 p2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), KVT_F32_MANT_BITS));
    __m256 r = _mm256_mul_ps(_mm256_mul_ps(j, p1), p2);
    __m256 an = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), n);
    __m256 big = _mm256_cmp_ps(an, nmax, _CMP_GT_OQ);
    __m256 alt = _mm256_andnot_ps(_mm256_cmp_ps(n, _mm256_setzero_ps(), _CMP_LE_OQ), _mm256_set1_ps(INFINITY));
    return _mm256_blendv_ps(r, alt, big);
}

static T2 double exp_sum(float *x, float m, int64_t n, int ph) {
    const __m256 mv = _mm256_set1_ps(m);
    double sum = 0.0;
    for (int64_t i = 0; i < n; ph = 0) { /* lanes ph .. ph+c-1 hold x[i .. i+c-1] */
        float t[V] = {0};
        const int64_t c = n - i < V - ph ? n - i : V - ph;
        if (c == V) { /* a whole chunk in place */
            v16 e = {vexp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), mv)),
                     vexp8(_mm256_sub_ps(_mm256_loadu_ps(x + i + H), mv))};
            _mm256_storeu_ps(x + i, e.lo);
            _mm256_storeu_ps(x + i + H, e.hi);
            sum += (double)hsum16(e);
            i += V;
            continue;
        }
        memcpy(t + ph, x + i, (size_t)c * sizeof(float));
        v16 e = {vexp8(_mm256_sub_ps(_mm256_loadu_ps(t), mv)), vexp8(_mm256_sub_ps(_mm256_loadu_ps(t + H), mv))};
        _mm256_storeu_ps(t, e.lo);
        _mm256_storeu_ps(t + H, e.hi);
        for (int k = 0; k < V; k++)
            if (k < ph || k >= ph + c) t[k] = 0.0f; /* missing lanes are +0 */
        memcpy(x + i, t + ph, (size_t)c * sizeof(float));
        sum += (double)hsum16(load16(t));
        i += c;
    }
    return sum;
}

static T2 void scale_row(float *x, int64_t n, float s, int f16) {
    const __m256 vs = _mm256_set1_ps(s);
    int64_t i = 0;
    if (f16) {
        for (; i + H <= n; i += H)
            _mm256_storeu_ps(
                x + i,
                _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_mul_ps(_mm256_loadu_ps(x + i), vs), _MM_FROUND_TO_NEAREST_INT)));
        for (; i < n; i++) x[i] = _cvtsh_ss(_cvtss_sh(x[i] * s, _MM_FROUND_TO_NEAREST_INT));
        return;
    }
    for (; i + H <= n; i += H) _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), vs));
    for (; i < n; i++) x[i] *= s;
}

static T2 float vmax(const float *x, int64_t n) {
    float m = x[0];
    for (int64_t i = 1; i < n; i++) m = x[i] > m ? x[i] : m;
    return m;
}

INLINE2 __m256 silu8(__m256 g) {
    __m256 e = vexp8(_mm256_sub_ps(_mm256_setzero_ps(), g));
    return _mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

static T2 void silu_mul(float *gate, const float *up, int64_t n) {
    int64_t i = 0;
    for (; i + H <= n; i += H)
        _mm256_storeu_ps(gate + i, _mm256_mul_ps(silu8(_mm256_loadu_ps(gate + i)), _mm256_loadu_ps(up + i)));
    if (i < n) {
        float g[H] = {0}, u[H] = {0};
        memcpy(g, gate + i, (size_t)(n - i) * sizeof(float));
        memcpy(u, up + i, (size_t)(n - i) * sizeof(float));
        _mm256_storeu_ps(g, _mm256_mul_ps(silu8(_mm256_loadu_ps(g)), _mm256_loadu_ps(u)));
        memcpy(gate + i, g, (size_t)(n - i) * sizeof(float));
    }
}

/* Q8_0/Q8_1 activations, the bits of ops.c's sc_quantize_q8_row (see the
 * AVX-512 variant's): the quants go through memory for the truncating cast. */
static T2 void quantize_q8_row(const float *x, int64_t k, uint8_t *q, float *d, float *s) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int64_t b = 0; b < k / KVT_Q8_0_BLOCK; b++) {
        const float *xb = x + b * KVT_Q8_0_BLOCK;
        __m256 v[KVT_Q8_0_BLOCK / H], m = _mm256_setzero_ps();
        for (int i = 0; i < KVT_Q8_0_BLOCK / H; i++) {
            v[i] = _mm256_loadu_ps(xb + i * H);
            m = _mm256_max_ps(_mm256_andnot_ps(sign, v[i]), m);
        }
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        const float amax = _mm_cvtss_f32(_mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1)));
        const float db = amax / KVT_Q8_MAX, id = amax != 0.0f ? KVT_Q8_MAX / amax : 0.0f;
        d[b] = kvt_f16_to_f32(kvt_f32_to_f16(db));
        int32_t qi[KVT_Q8_0_BLOCK];
        for (int i = 0; i < KVT_Q8_0_BLOCK / H; i++)
            _mm256_storeu_si256((__m256i *)(void *)(qi + i * H),
                                _mm256_cvtps_epi32(_mm256_mul_ps(v[i], _mm256_set1_ps(id))));
        uint32_t sum = 0;
        for (int i = 0; i < KVT_Q8_0_BLOCK; i++) {
            sum += (uint32_t)qi[i];
            q[b * KVT_Q8_0_BLOCK + i] = (uint8_t)(qi[i] + KVT_Q8_ACT_BIAS);
        }
        if (s) s[b] = kvt_f16_to_f32(kvt_f32_to_f16((float)(int32_t)sum * db));
    }
}

static const kvt_ops_vtable ops_avx2 = {
    .name = "avx2",
    .matmul_rows = mm_rows,
    .matmul_k_rows = kvt_qk_mm_avx2,
    .matmul_ql_rows = kvt_ql_mm_avx2,
    .quantize_q8_row = quantize_q8_row,
    .quantize_q8k_row = kvt_qk_quantize_acts, /* the scalar one */
    .dot_f32 = dot_f32,
    .dot_f32_f16 = dot_f32_f16,
    .axpy_f32 = axpy_f32,
    .axpy_f16 = axpy_f16,
    .f32_to_f16_row = f32_to_f16_row,
    .f16_to_f32_row = f16_to_f32_row,
    .round_f16_row = round_f16_row,
    .round_bf16_row = round_bf16_row,
    .exp_sum = exp_sum,
    .max = vmax,
    .scale_row = scale_row,
    .silu_mul = silu_mul,
    .attn_qk = kvt_attn_qk_avx2,
    .attn_av = kvt_attn_av_avx2,
    .kv_q8_dequant_rows = kvt_kv_q8_dequant_rows_scalar,
    .kv_q8_dequant_columns = kvt_kv_q8_dequant_columns_scalar,
};

const kvt_ops_vtable *kvt_ops_avx2(void) {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && kvt_cpu_has_f16c()) return &ops_avx2;
    return NULL;
}
