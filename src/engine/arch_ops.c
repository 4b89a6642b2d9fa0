// SPDX-License-Identifier: MIT
/* Elementwise steps of the architecture variations; see arch_ops.h. */
#include "arch_ops.h"

#include <math.h>

#include "ops.h"

#define GELU_COEF_A 0.044715f
#define SQRT_2_OVER_PI 0.79788456080286535587989211986876f
#define GELU_LINEAR_BOUND 10.0f /* past +-this, gelu(x) is x or 0 in f16 anyway */

/* The tanh approximation, with 1 + a*x*x as one fma: llama.cpp's CPU backend
 * is compiled with contraction on, and its GELU table (libggml-cpu's init
 * loop) evaluates exactly this; every other operation is rounded apart. */
static float gelu_tanh(float x) {
    return 0.5f * x * (1.0f + tanhf(SQRT_2_OVER_PI * x * fmaf(GELU_COEF_A * x, x, 1.0f)));
}

/* GELU through f16 on both sides, as a table over f16 inputs would give it
 * (llama.cpp's ggml_vec_gelu_f32 under GGML_GELU_FP16, which its CPU backend
 * defines: the table indexed by the f16 of x, past +-10 zero or x itself). */
static float gelu_f16(float x) {
    if (x <= -GELU_LINEAR_BOUND) return 0.0f;
    if (x >= GELU_LINEAR_BOUND) return x;
    float xh = kvt_f16_to_f32(kvt_f32_to_f16(x));
    return kvt_f16_to_f32(kvt_f32_to_f16(gelu_tanh(xh)));
}

void kvt_gelu_mul(float *gate, const float *up, int64_t n) {
    for (int64_t i = 0; i < n; i++) gate[i] = gelu_f16(gate[i]) * up[i];
}

void kvt_softcap(float *x, int64_t n, float cap) {
    const float inv = 1.0f / cap;
    for (int64_t i = 0; i < n; i++) x[i] = tanhf(x[i] * inv) * cap;
}

void kvt_scale(float *x, int64_t n, float s) {
    for (int64_t i = 0; i < n; i++) x[i] *= s;
}
