// x[t * width + i] += b[i] for every row t of a flat buffer of n floats (a
// bias row added to each token's projection), one invocation per element on
// a flat grid, as the CPU's add.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = KVT_WG) in;
layout(std430, set = 0, binding = 0) buffer XB { float x[]; };
layout(std430, set = 0, binding = 1) readonly buffer BB { float b[]; };
layout(push_constant) uniform P { uint n; uint width; } pc;

void main() {
    uint i = kvt_flat_id();
    if (i >= pc.n) return;
    precise float v = x[i] + b[i % pc.width];
    x[i] = v;
}
