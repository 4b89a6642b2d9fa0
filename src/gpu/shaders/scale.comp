// x[i] *= s for i < n (the query scale of phi3 and gemma), one invocation per
// element on a flat grid.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = KVT_WG) in;
layout(std430, set = 0, binding = 0) buffer XB { float x[]; };
layout(push_constant) uniform P { uint n; float s; } pc;

void main() {
    uint i = kvt_flat_id();
    if (i >= pc.n) return;
    precise float v = x[i] * pc.s;
    x[i] = v;
}
