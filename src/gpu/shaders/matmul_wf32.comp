// f32 weights: invocation l takes columns l, l + KVT_WG, ...
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "matmul_w.glsl"

layout(std430, set = 0, binding = 1) readonly buffer W { float w[]; };

void row_dot(uint r, uint t0, uint nt, inout float acc[MM_TOKS]) {
    uint wb = r * pc.cols;
    for (uint c = gl_LocalInvocationID.x; c < pc.cols; c += KVT_WG) mm_fma(w[wb + c], t0, nt, c, acc);
}
