/* The tiling of the SIMD attention kernels (attn.h), written once for every
 * instruction-set variant: attn_avx2.c and attn_avx512.c define the vector
 * type and a handful of operations on it, then include this file, which
 * defines the two kernels from them. The numerics are those of attn.h: a
 * score is one lane of a vector of keys, its dot kept in 16 lane classes
 * d mod 16 (one fma per step from +0), summed by the canonical lane tree, then
 * one multiply by the scale; an output element of
 * the value pass is one lane of a vector of dimensions, stepped through t in
 * order. Which keys, heads or dimensions share a tile never changes a bit.
 *
 * The includer defines, before including:
 *   ATT_LANES                     floats per vector
 *   ATT_V, ATT_M                  the vector type and a lane-mask type
 *   ATT_INLINE                    `static inline`, always inlined, with the target attribute
 *   ATT_TARGET                    the target attribute alone (for the two kernels)
 *   ATT_AV_HEADS, ATT_AV_CHUNKS   value tile: heads x vectors of dimensions
 *   ATT_QK_NAME, ATT_AV_NAME      the names of the kernels to define
 * and, as ATT_INLINE functions:
 *   ATT_M att_mask(int32_t left)        the first min(left, ATT_LANES) lanes
 *   ATT_V att_zero(void), att_set1(float), att_fma(a, b, c) = a * b + c (one
 *         rounding), att_mul(a, b), att_add(a, b)
 *   ATT_V att_load(p, f16, off, m)     the lanes of m from element off of p (f16
 *         or f32); lanes outside m are 0 and not read
 *   ATT_V att_load_f32(p, m), void att_store_f32(p, m, v)   likewise for f32.
 * The tile functions take their counts as arguments but are always inlined
 * into switches on constants, so the accumulator arrays become registers. */

#include <stdint.h>

#if ATT_AV_HEADS != 4 || ATT_AV_CHUNKS < 3 || ATT_AV_CHUNKS > 4
#error "the value tile is 4 heads x 3 or 4 vectors"
#endif

/* The scores of one head for one vector of keys (lanes outside m are 0): the
 * 16 lane classes d mod 16 of the dot, each stepped through its d in order
 * from +0 in its own accumulator (vectorized over the keys), then summed by the
 * canonical lane tree of ops.h (kvt_ops_lanes_sum), as attn.h states. */
ATT_INLINE ATT_V att_qk_vec(const float *qg, int32_t hd, const void *kt, int32_t stride, int f16, int32_t t0,
                            ATT_M m) {
    ATT_V l[16];
    _Pragma("GCC unroll 16") for (int j = 0; j < 16; j++) l[j] = att_zero();
    int32_t d = 0;
    for (; d + 16 <= hd; d += 16)
        _Pragma("GCC unroll 16") for (int j = 0; j < 16; j++)
            l[j] = att_fma(att_set1(qg[d + j]), att_load(kt, f16, (int64_t)(d + j) * stride + t0, m), l[j]);
    for (int j = 0; d + j < hd; j++)
        l[j] = att_fma(att_set1(qg[d + j]), att_load(kt, f16, (int64_t)(d + j) * stride + t0, m), l[j]);
    _Pragma("GCC unroll 8") for (int j = 0; j < 8; j++) l[j] = att_add(l[j], l[j + 8]);
    _Pragma("GCC unroll 4") for (int j = 0; j < 4; j++) l[j] = att_add(l[j], l[j + 4]);
    _Pragma("GCC unroll 2") for (int j = 0; j < 2; j++) l[j] = att_add(l[j], l[j + 2]);
    return att_add(l[0], l[1]);
}

ATT_TARGET void ATT_QK_NAME(const float *q, int32_t G, int32_t hd, const void *kt, int32_t stride, int f16, int32_t T,
                            float scale, float *scores, int64_t ld) {
    const ATT_V vscale = att_set1(scale);
    for (int32_t t0 = 0; t0 < T; t0 += ATT_LANES) {
        const ATT_M m = att_mask(T - t0);
        for (int32_t g = 0; g < G; g++)
            att_store_f32(scores + (int64_t)g * ld + t0, m,
                          att_mul(att_qk_vec(q + (int64_t)g * hd, hd, kt, stride, f16, t0, m), vscale));
    }
}

ATT_INLINE void att_av_tile(const float *w, int64_t ld, const void *v, int f16, int32_t T, int32_t hd, int32_t c0,
                            float *out, const int gn, const int cn) {
    ATT_V acc[ATT_AV_HEADS][ATT_AV_CHUNKS];
    ATT_M mask[ATT_AV_CHUNKS];
    _Pragma("GCC unroll 4") for (int c = 0; c < cn; c++) {
        mask[c] = att_mask(hd - (c0 + c) * ATT_LANES);
        _Pragma("GCC unroll 4") for (int g = 0; g < gn; g++)
            acc[g][c] = att_load_f32(out + (int64_t)g * hd + (c0 + c) * ATT_LANES, mask[c]);
    }
    for (int32_t t = 0; t < T; t++) {
        ATT_V vx[ATT_AV_CHUNKS];
        _Pragma("GCC unroll 4") for (int c = 0; c < cn; c++)
            vx[c] = att_load(v, f16, (int64_t)t * hd + (c0 + c) * ATT_LANES, mask[c]);
        _Pragma("GCC unroll 4") for (int g = 0; g < gn; g++) {
            ATT_V wt = att_set1(w[(int64_t)g * ld + t]);
            _Pragma("GCC unroll 4") for (int c = 0; c < cn; c++) acc[g][c] = att_fma(wt, vx[c], acc[g][c]);
        }
    }
    _Pragma("GCC unroll 4") for (int c = 0; c < cn; c++)
        _Pragma("GCC unroll 4") for (int g = 0; g < gn; g++)
            att_store_f32(out + (int64_t)g * hd + (c0 + c) * ATT_LANES, mask[c], acc[g][c]);
}

/* One head group of a value tile: GN heads, cn (1..AV_CHUNKS) vectors of dimensions. */
#if ATT_AV_CHUNKS > 3
#define ATT_AV_C4(GN) case 3: att_av_tile(wg, ld, v, f16, T, hd, c0, og, GN, 3); break;
#else
#define ATT_AV_C4(GN)
#endif
#define ATT_AV_GN(GN)                                                                                              \
    switch (cn) {                                                                                                  \
    case 1: att_av_tile(wg, ld, v, f16, T, hd, c0, og, GN, 1); break;                                              \
    case 2: att_av_tile(wg, ld, v, f16, T, hd, c0, og, GN, 2); break;                                              \
    ATT_AV_C4(GN)                                                                                                  \
    default: att_av_tile(wg, ld, v, f16, T, hd, c0, og, GN, ATT_AV_CHUNKS); break;                                 \
    }

ATT_TARGET void ATT_AV_NAME(const float *w, int64_t ld, int32_t G, const void *v, int f16, int32_t T, int32_t hd,
                            float *out) {
    const int32_t chunks = (hd + ATT_LANES - 1) / ATT_LANES;
    for (int32_t g0 = 0; g0 < G; g0 += ATT_AV_HEADS) {
        const int32_t gn = G - g0 < ATT_AV_HEADS ? G - g0 : ATT_AV_HEADS;
        const float *wg = w + (int64_t)g0 * ld;
        float *og = out + (int64_t)g0 * hd;
        for (int32_t c0 = 0; c0 < chunks; c0 += ATT_AV_CHUNKS) {
            const int32_t cn = chunks - c0 < ATT_AV_CHUNKS ? chunks - c0 : ATT_AV_CHUNKS;
            switch (gn) {
            case 1: ATT_AV_GN(1) break;
            case 2: ATT_AV_GN(2) break;
            case 3: ATT_AV_GN(3) break;
            default: ATT_AV_GN(ATT_AV_HEADS) break;
            }
        }
    }
}
#undef ATT_AV_GN
#undef ATT_AV_C4
