/* Attention kernels (see attn.h): an AVX-512 path and a scalar path that
 * performs the same operations in the same order. The selected kernel
 * variant's table (ops_impl.h) says which runs: AVX-512 for "avx512", the
 * scalar path for "avx2" and "scalar". */
#include "attn.h"

#include <math.h>
#include <string.h>

#include "ops.h"
#include "ops_impl.h"

#define LANES 16
#define AV_HEADS 4  /* value pass: heads x chunks of accumulators kept in registers */
#define AV_CHUNKS 4

static float k_at(const void *k, int f16, int64_t i) {
    if (f16) return kvt_f16_to_f32(((const uint16_t *)k)[i]);
    return ((const float *)k)[i];
}

void kvt_attn_qk_scalar(const float *q, int32_t G, int32_t hd, const void *kt, int32_t stride, int f16, int32_t T,
                        float scale, float *scores, int64_t ld) {
    for (int32_t g = 0; g < G; g++)
        for (int32_t t = 0; t < T; t++) {
            float l[LANES] = {0};
            for (int32_t d = 0; d < hd; d++)
                l[d % LANES] = fmaf(q[(int64_t)g * hd + d], k_at(kt, f16, (int64_t)d * stride + t), l[d % LANES]);
            scores[(int64_t)g * ld + t] = kvt_ops_lanes_sum(l) * scale;
        }
}

void kvt_attn_av_scalar(const float *w, int64_t ld, int32_t G, const void *v, int f16, int32_t T, int32_t hd,
                        float *out) {
    for (int32_t t = 0; t < T; t++)
        for (int32_t g = 0; g < G; g++) {
            float wt = w[(int64_t)g * ld + t];
            for (int32_t d = 0; d < hd; d++)
                out[(int64_t)g * hd + d] = fmaf(wt, k_at(v, f16, (int64_t)t * hd + d), out[(int64_t)g * hd + d]);
        }
}

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#define AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,f16c,fma")))

AVX512 static inline __m512 load_row(const void *p, int f16, int64_t off, __mmask16 m) {
    if (f16) return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, (const uint16_t *)p + off));
    return _mm512_maskz_loadu_ps(m, (const float *)p + off);
}

#define INLINE512 static inline __attribute__((always_inline)) AVX512

/* 16 scores (keys t0.., lanes past T masked) of one head: the 16 lane
 * classes d mod 16 of the dot each in its own register (vectorized over the
 * keys), then the canonical tree across them. */
INLINE512 __m512 qk_scores16(const float *qg, int32_t hd, const void *kt, int32_t stride, int f16, int32_t t0,
                             __mmask16 m) {
    __m512 l[LANES];
    _Pragma("GCC unroll 16") for (int j = 0; j < LANES; j++) l[j] = _mm512_setzero_ps();
    int32_t d = 0;
    for (; d + LANES <= hd; d += LANES)
        _Pragma("GCC unroll 16") for (int j = 0; j < LANES; j++)
            l[j] = _mm512_fmadd_ps(_mm512_set1_ps(qg[d + j]), load_row(kt, f16, (int64_t)(d + j) * stride + t0, m), l[j]);
    for (int j = 0; d + j < hd; j++)
        l[j] = _mm512_fmadd_ps(_mm512_set1_ps(qg[d + j]), load_row(kt, f16, (int64_t)(d + j) * stride + t0, m), l[j]);
    _Pragma("GCC unroll 8") for (int j = 0; j < 8; j++) l[j] = _mm512_add_ps(l[j], l[j + 8]);
    _Pragma("GCC unroll 4") for (int j = 0; j < 4; j++) l[j] = _mm512_add_ps(l[j], l[j + 4]);
    _Pragma("GCC unroll 2") for (int j = 0; j < 2; j++) l[j] = _mm512_add_ps(l[j], l[j + 2]);
    return _mm512_add_ps(l[0], l[1]);
}

AVX512 void kvt_attn_qk_avx512(const float *q, int32_t G, int32_t hd, const void *kt, int32_t stride, int f16,
                             int32_t T, float scale, float *scores, int64_t ld) {
    const __m512 vscale = _mm512_set1_ps(scale);
    for (int32_t t0 = 0; t0 < T; t0 += LANES) {
        const int32_t left = T - t0;
        const __mmask16 m = left >= LANES ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1);
        for (int32_t g = 0; g < G; g++)
            _mm512_mask_storeu_ps(scores + (int64_t)g * ld + t0, m,
                                  _mm512_mul_ps(qk_scores16(q + (int64_t)g * hd, hd, kt, stride, f16, t0, m), vscale));
    }
}

INLINE512 void av_tile(const float *w, int64_t ld, const void *v, int f16, int32_t T, int32_t hd, int32_t c0,
                       float *out, const int gn, const int cn) {
    __m512 acc[AV_HEADS][AV_CHUNKS];
    __mmask16 mask[AV_CHUNKS];
    _Pragma("GCC unroll 4") for (int c = 0; c < cn; c++) {
        int32_t left = hd - (c0 + c) * LANES;
        mask[c] = left >= LANES ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1);
        _Pragma("GCC unroll 4") for (int g = 0; g < gn; g++)
            acc[g][c] = _mm512_maskz_loadu_ps(mask[c], out + (int64_t)g * hd + (c0 + c) * LANES);
    }
    for (int32_t t = 0; t < T; t++) {
        __m512 vx[AV_CHUNKS];
        _Pragma("GCC unroll 4") for (int c = 0; c < cn; c++)
            vx[c] = load_row(v, f16, (int64_t)t * hd + (c0 + c) * LANES, mask[c]);
        _Pragma("GCC unroll 4") for (int g = 0; g < gn; g++) {
            __m512 wt = _mm512_set1_ps(w[(int64_t)g * ld + t]);
            _Pragma("GCC unroll 4") for (int c = 0; c < cn; c++) acc[g][c] = _mm512_fmadd_ps(wt, vx[c], acc[g][c]);
        }
    }
    _Pragma("GCC unroll 4") for (int c = 0; c < cn; c++)
        _Pragma("GCC unroll 4") for (int g = 0; g < gn; g++)
            _mm512_mask_storeu_ps(out + (int64_t)g * hd + (c0 + c) * LANES, mask[c], acc[g][c]);
}

#define AV_CASE(GN)                                                                                    \
    case GN:                                                                                           \
        switch (cn) {                                                                                  \
        case 1: av_tile(wg, ld, v, f16, T, hd, c0, og, GN, 1); break;                                  \
        case 2: av_tile(wg, ld, v, f16, T, hd, c0, og, GN, 2); break;                                  \
        case 3: av_tile(wg, ld, v, f16, T, hd, c0, og, GN, 3); break;                                  \
        default: av_tile(wg, ld, v, f16, T, hd, c0, og, GN, 4); break;                                 \
        }                                                                                              \
        break;

AVX512 void kvt_attn_av_avx512(const float *w, int64_t ld, int32_t G, const void *v, int f16, int32_t T, int32_t hd,
                             float *out) {
    int32_t chunks = (hd + LANES - 1) / LANES;
    for (int32_t g0 = 0; g0 < G; g0 += AV_HEADS) {
        int32_t gn = G - g0 < AV_HEADS ? G - g0 : AV_HEADS;
        const float *wg = w + (int64_t)g0 * ld;
        float *og = out + (int64_t)g0 * hd;
        for (int32_t c0 = 0; c0 < chunks; c0 += AV_CHUNKS) {
            int32_t cn = chunks - c0 < AV_CHUNKS ? chunks - c0 : AV_CHUNKS;
            switch (gn) { AV_CASE(1) AV_CASE(2) AV_CASE(3) default: AV_CASE(4) }
        }
    }
}

#endif

void kvt_attn_qk(const float *q, int32_t G, int32_t hd, const void *kt, int32_t stride, int f16, int32_t T,
                 float scale, float *scores, int64_t ld) {
    kvt_ops_active()->attn_qk(q, G, hd, kt, stride, f16, T, scale, scores, ld);
}

void kvt_attn_av(const float *w, int64_t ld, int32_t G, const void *v, int f16, int32_t T, int32_t hd, float *out) {
    kvt_ops_active()->attn_av(w, ld, G, v, f16, T, hd, out);
}
