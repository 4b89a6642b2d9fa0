/* Attention kernels (see attn.h): the scalar path, which performs the
 * canonical operations in the canonical order one element at a time, and the
 * front ends. The selected kernel variant's table (ops_impl.h) says which
 * kernel runs: attn_avx512.c's for "avx512", attn_avx2.c's for "avx2" (both
 * tiled by attn_tmpl.h), the scalar path for "scalar". */
#include "attn.h"

#include <math.h>
#include <string.h>

#include "ops.h"
#include "ops_impl.h"

#define LANES 16 /* lane classes of a score (attn.h) */

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


void kvt_attn_qk(const float *q, int32_t G, int32_t hd, const void *kt, int32_t stride, int f16, int32_t T,
                 float scale, float *scores, int64_t ld) {
    kvt_ops_active()->attn_qk(q, G, hd, kt, stride, f16, T, scale, scores, ld);
}

void kvt_attn_av(const float *w, int64_t ld, int32_t G, const void *v, int f16, int32_t T, int32_t hd, float *out) {
    kvt_ops_active()->attn_av(w, ld, G, v, f16, T, hd, out);
}
