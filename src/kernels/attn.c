// SPDX-License-Identifier: MIT
/* Attention kernels (see attn.h): the scalar path, which performs the
 * canonical operations in the canonical order one element at a time, and the
 * front ends. The selected kernel variant's table (ops_impl.h) says which
 * kernel runs: attn_avx512.c's for "avx512" and "amx", attn_avx2.c's for "avx2" (both
 * tiled by attn_tmpl.h), the scalar path for "scalar". */
#include "attn.h"

#include <math.h>
#include <string.h>

#include "kv_quant.h"
#include "ops.h"
#include "ops_impl.h"

#define LANES KVT_ATTN_LANES /* lane classes of a score or an output (attn.h) */


/* Element (d, t) of a transposed K block of `stride` columns, from column
 * t_base on: f32, f16, or q8_0 columns (kv_quant.h), the last read as
 * kvt_kv_q8_dequant_columns reads it. */
static float k_at(const void *k, int kind, int32_t hd, int64_t stride, int64_t t_base, int32_t d, int64_t t) {
    if (kind == KVT_ATTN_Q8) {
        const uint8_t *cols = k;
        const int8_t *q = (const int8_t *)(const void *)(cols + (int64_t)(hd / 32) * stride * 2);
        return kvt_kv_q8_scale(cols + ((int64_t)(d / 32) * stride + t_base + t) * 2) *
            (float)q[(int64_t)d * stride + t_base + t];
    }
    const int64_t i = (int64_t)d * stride + t_base + t;
    if (kind == KVT_ATTN_F16) return kvt_f16_to_f32(((const uint16_t *)k)[i]);
    return ((const float *)k)[i];
}

/* Element d of V row t (hd elements): f32, f16, or q8_0 rows (kv_quant.h),
 * the last read as kvt_kv_q8_dequant_rows reads it. */
static float v_at(const void *v, int kind, int32_t hd, int64_t t, int32_t d) {
    if (kind == KVT_ATTN_Q8) {
        const uint8_t *blk = (const uint8_t *)v + t * (hd / 32 * 34) + (int64_t)(d / 32) * 34;
        return kvt_kv_q8_scale(blk) * (float)(int8_t)blk[2 + d % 32];
    }
    if (kind == KVT_ATTN_F16) return kvt_f16_to_f32(((const uint16_t *)v)[t * hd + d]);
    return ((const float *)v)[t * hd + d];
}

void kvt_attn_qk_scalar(const float *q, int32_t G, int32_t hd, const void *kt, int32_t stride, int kind, int32_t t_base,
                        int32_t T, float scale, float *scores, int64_t ld) {
    for (int32_t g = 0; g < G; g++)
        for (int32_t t = 0; t < T; t++) {
            float l[LANES] = {0};
            for (int32_t d = 0; d < hd; d++)
                l[d % LANES] = fmaf(q[(int64_t)g * hd + d], k_at(kt, kind, hd, stride, t_base, d, t), l[d % LANES]);
            scores[(int64_t)g * ld + t] = kvt_ops_lanes_sum(l) * scale;
        }
}

void kvt_attn_av_scalar(const kvt_attn_run *runs, int32_t n_runs, int64_t ld, int32_t G, int kind, int32_t hd,
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
                    *x = fmaf(runs[r].w[(int64_t)g * ld + t], v_at(runs[r].v, kind, hd, t, d), *x);
                }
            if (acc_out)
                for (int32_t j = j0; j < j1; j++) acc_out[((int64_t)g * LANES + j) * hd + d] = l[j];
            if (out) out[(int64_t)g * hd + d] = kvt_ops_lanes_sum(l);
        }
}

void kvt_attn_qk(const float *q, int32_t G, int32_t hd, const void *kt, int32_t stride, int f16, int32_t T, float scale,
                 float *scores, int64_t ld) {
    kvt_ops_active()->attn_qk(q, G, hd, kt, stride, f16 ? KVT_ATTN_F16 : KVT_ATTN_F32, 0, T, scale, scores, ld);
}

void kvt_attn_qk_q8(const float *q, int32_t G, int32_t hd, const uint8_t *cols, int32_t B, int32_t t0, int32_t T,
                    float scale, float *scores, int64_t ld) {
    kvt_ops_active()->attn_qk(q, G, hd, cols, B, KVT_ATTN_Q8, t0, T, scale, scores, ld);
}

void kvt_attn_av(const kvt_attn_run *runs, int32_t n_runs, int64_t ld, int32_t G, int kind, int32_t hd,
                 const float *acc_in, float *acc_out, float *out) {
    kvt_ops_active()->attn_av(runs, n_runs, ld, G, kind, hd, 0, LANES, acc_in, acc_out, out);
}

void kvt_attn_av_lanes(const kvt_attn_run *runs, int32_t n_runs, int64_t ld, int32_t G, int kind, int32_t hd,
                       int32_t j0, int32_t j1, const float *acc_in, float *acc_out) {
    if (j0 < j1) kvt_ops_active()->attn_av(runs, n_runs, ld, G, kind, hd, j0, j1, acc_in, acc_out, NULL);
}
