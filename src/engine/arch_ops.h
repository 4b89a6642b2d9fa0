// SPDX-License-Identifier: MIT
/* Elementwise steps some architectures add to the llama forward pass (see
 * src/model/arch.c): GELU as llama.cpp's CPU backend computes it, soft-capping
 * and scaling. Each result depends only on its own input element, so they keep
 * the engine's batch invariance, and they are plain C (libm), so every kernel
 * variant gives the same bits. */
#ifndef KVT_ARCH_OPS_H
#define KVT_ARCH_OPS_H

#include <stdint.h>

/* gate[i] = gelu(gate[i]) * up[i], with GELU's tanh form,
 * 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), evaluated as llama.cpp's
 * CPU backend does: x <= -10 gives 0, x >= 10 gives x, otherwise x is rounded
 * to f16, the tanh form computed in f32 and its result rounded to f16. */
void kvt_gelu_mul(float *gate, const float *up, int64_t n);
/* x[i] = cap * tanh(x[i] * (1 / cap)), as ggml's scale, tanh, scale. cap > 0. */
void kvt_softcap(float *x, int64_t n, float cap);
/* x[i] *= s. */
void kvt_scale(float *x, int64_t n, float s);

#endif
