// g[i] = g[i] / (1 + exp(-g[i])) * u[i] for i < n (SwiGLU's gate), one
// invocation per element on a flat grid, in the CPU's order of operations.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = KVT_WG) in;
layout(std430, set = 0, binding = 0) buffer GB { float g[]; };
layout(std430, set = 0, binding = 1) readonly buffer UB { float u[]; };
layout(push_constant) uniform P { uint n; } pc;

void main() {
    uint i = kvt_flat_id();
    if (i >= pc.n) return;
    float v = g[i];
    precise float den = 1.0 + exp(0.0 - v);
    precise float q = v / den;
    precise float o = q * u[i];
    g[i] = o;
}
