// x[i] = cap * tanh(x[i] * (1 / cap)) for i < n (gemma2's final logit
// soft-capping), in the CPU's order: the reciprocal first, then the product,
// the tanh and the product by cap. One invocation per element, flat grid.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "tanh.glsl"

layout(local_size_x = KVT_WG) in;
layout(std430, set = 0, binding = 0) buffer XB { float x[]; };
layout(push_constant) uniform P { uint n; float cap; } pc;

void main() {
    uint i = kvt_flat_id();
    if (i >= pc.n) return;
    precise float inv = 1.0 / pc.cap;
    precise float a = x[i] * inv;
    precise float v = kvt_tanh(a) * pc.cap;
    x[i] = v;
}
