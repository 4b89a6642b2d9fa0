// g[i] = gelu(g[i]) * u[i] for i < n (gemma's GEGLU), GELU in its tanh form
// as the CPU engine evaluates it (src/engine/arch_ops.c): x <= -10 gives 0,
// x >= 10 gives x, otherwise x is rounded to f16, 0.5 x (1 + tanh(sqrt(2/pi)
// x (1 + 0.044715 x^2))) is computed in f32 with 1 + a x * x as one fma, and
// the result is rounded to f16. One invocation per element, flat grid.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "tanh.glsl"

layout(local_size_x = KVT_WG) in;
layout(std430, set = 0, binding = 0) buffer GB { float g[]; };
layout(std430, set = 0, binding = 1) readonly buffer UB { float u[]; };
layout(push_constant) uniform P { uint n; } pc;

float gelu_tanh(float x) {
    precise float ax = 0.044715 * x;
    precise float inner = fma(ax, x, 1.0);
    precise float sx = 0.7978845608028654 * x;
    precise float z = sx * inner;
    precise float hx = 0.5 * x;
    precise float one = 1.0 + kvt_tanh(z);
    precise float r = hx * one;
    return r;
}

void main() {
    uint i = kvt_flat_id();
    if (i >= pc.n) return;
    float v = g[i], a;
    if (v <= -10.0) a = 0.0;
    else if (v >= 10.0) a = v;
    else a = kvt_round_f16(gelu_tanh(kvt_round_f16(v)));
    precise float o = a * u[i];
    g[i] = o;
}
