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
#define GROUP_MAX 8 /* query heads processed together per K row */
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
            float acc = 0.0f;
            for (int32_t d = 0; d < hd; d++) acc = fmaf(q[(int64_t)g * hd + d], k_at(kt, f16, (int64_t)d * stride + t), acc);
            scores[(int64_t)g * ld + t] = acc * scale;
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

/* Key vectors (of 16 keys) per pass: GROUP_MAX heads x QK_KVEC accumulators
 * stay in registers. The inner kernels take their counts as arguments but are
 * always inlined into a switch on constant values, so the accumulator arrays
 * become registers (runtime-sized loops would keep them on the stack). */
#define QK_KVEC 2
#define INLINE512 static inline __attribute__((always_inline)) AVX512

INLINE512 void qk_tile(const float *q, int32_t hd, const void *kt, int32_t stride, int f16, int32_t t0,
                       const __mmask16 *m, float *scores, int64_t ld, __m512 vscale, const int gn, const int nvec) {
    __m512 acc[GROUP_MAX][QK_KVEC];
    _Pragma("GCC unroll 8") for (int g = 0; g < gn; g++)
        _Pragma("GCC unroll 2") for (int vi = 0; vi < nvec; vi++) acc[g][vi] = _mm512_setzero_ps();
    for (int32_t d = 0; d < hd; d++) {
        __m512 kx[QK_KVEC];
        _Pragma("GCC unroll 2") for (int vi = 0; vi < nvec; vi++)
            kx[vi] = load_row(kt, f16, (int64_t)d * stride + t0 + vi * LANES, m[vi]);
        _Pragma("GCC unroll 8") for (int g = 0; g < gn; g++) {
            __m512 qd = _mm512_set1_ps(q[(int64_t)g * hd + d]);
            _Pragma("GCC unroll 2") for (int vi = 0; vi < nvec; vi++) acc[g][vi] = _mm512_fmadd_ps(qd, kx[vi], acc[g][vi]);
        }
    }
    _Pragma("GCC unroll 8") for (int g = 0; g < gn; g++)
        _Pragma("GCC unroll 2") for (int vi = 0; vi < nvec; vi++)
            _mm512_mask_storeu_ps(scores + (int64_t)g * ld + t0 + vi * LANES, m[vi], _mm512_mul_ps(acc[g][vi], vscale));
}

#define QK_CASE(GN)                                                                                    \
    case GN:                                                                                           \
        if (nvec == 2) qk_tile(qg, hd, kt, stride, f16, t0, m, sg, ld, vscale, GN, 2);               \
        else qk_tile(qg, hd, kt, stride, f16, t0, m, sg, ld, vscale, GN, 1);                          \
        break;

AVX512 void kvt_attn_qk_avx512(const float *q, int32_t G, int32_t hd, const void *kt, int32_t stride, int f16,
                             int32_t T, float scale, float *scores, int64_t ld) {
    const __m512 vscale = _mm512_set1_ps(scale);
    for (int32_t t0 = 0; t0 < T; t0 += LANES * QK_KVEC) {
        int32_t nvec = (T - t0 + LANES - 1) / LANES;
        if (nvec > QK_KVEC) nvec = QK_KVEC;
        __mmask16 m[QK_KVEC] = {0, 0};
        for (int32_t vi = 0; vi < nvec; vi++) {
            int32_t left = T - t0 - vi * LANES;
            m[vi] = left >= LANES ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1);
        }
        for (int32_t g0 = 0; g0 < G; g0 += GROUP_MAX) {
            int32_t gn = G - g0 < GROUP_MAX ? G - g0 : GROUP_MAX;
            const float *qg = q + (int64_t)g0 * hd;
            float *sg = scores + (int64_t)g0 * ld;
            switch (gn) {
                QK_CASE(1) QK_CASE(2) QK_CASE(3) QK_CASE(4) QK_CASE(5) QK_CASE(6) QK_CASE(7) default:
                if (nvec == 2) qk_tile(qg, hd, kt, stride, f16, t0, m, sg, ld, vscale, GROUP_MAX, 2);
                else qk_tile(qg, hd, kt, stride, f16, t0, m, sg, ld, vscale, GROUP_MAX, 1);
            }
        }
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
