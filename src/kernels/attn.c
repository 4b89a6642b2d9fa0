// SPDX-License-Identifier: MIT
/* Attention kernels (see attn.h): the scalar path, which performs the
 * canonical operations in the canonical order one element at a time, and the
 * front ends. The selected kernel variant's table (ops_impl.h) says which
 * kernel runs: attn_avx512.c's for "avx512" and "amx", attn_avx2.c's for "avx2" (both
 * tiled by attn_tmpl.h), the scalar path for "scalar". */
#include "attn.h"

#include <math.h>
#include <string.h>

#include "ops.h"
#include "ops_impl.h"

#define LANES KVT_ATTN_LANES /* lane classes of a score or an output (attn.h) */

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

void kvt_attn_av_scalar(const kvt_attn_run *runs, int32_t n_runs, int64_t ld, int32_t G, int f16, int32_t hd,
                        int32_t j0, int32_t j1, const float *acc_in, float *acc_out, float *out) {
    for (int32_t g = 0; g < G; g++)
        for (int32_t d = 0; d < hd; d++) {
            float l[LANES] = {0};
            for (int32_t j = j0; j < j1; j++) l[j] = acc_in ? acc_in[((int64_t)g * LANES + j) * hd + d] : 0.0f;
            for (int32_t r = 0; r < n_runs; r++)
                for (int32_t t = 0; t < runs[r].T; t++) {
                    const int32_t j = (runs[r].pos + t) % LANES;
                    if (j < j0 || j >= j1) continue;
                    float *x = &l[j];
                    *x = fmaf(runs[r].w[(int64_t)g * ld + t], k_at(runs[r].v, f16, (int64_t)t * hd + d), *x);
                }
            if (acc_out)
                for (int32_t j = j0; j < j1; j++) acc_out[((int64_t)g * LANES + j) * hd + d] = l[j];
            if (out) out[(int64_t)g * hd + d] = kvt_ops_lanes_sum(l);
        }
}

void kvt_attn_qk(const float *q, int32_t G, int32_t hd, const void *kt, int32_t stride, int f16, int32_t T, float scale,
                 float *scores, int64_t ld) {
    kvt_ops_active()->attn_qk(q, G, hd, kt, stride, f16, T, scale, scores, ld);
}

void kvt_attn_av(const kvt_attn_run *runs, int32_t n_runs, int64_t ld, int32_t G, int f16, int32_t hd,
                 const float *acc_in, float *acc_out, float *out) {
    kvt_ops_active()->attn_av(runs, n_runs, ld, G, f16, hd, 0, LANES, acc_in, acc_out, out);
}

void kvt_attn_av_lanes(const kvt_attn_run *runs, int32_t n_runs, int64_t ld, int32_t G, int f16, int32_t hd, int32_t j0,
                       int32_t j1, const float *acc_in, float *acc_out) {
    if (j0 < j1) kvt_ops_active()->attn_av(runs, n_runs, ld, G, f16, hd, j0, j1, acc_in, acc_out, NULL);
}
