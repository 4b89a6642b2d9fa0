// f32 weights: invocation l takes columns l, l + KVT_WG, ...
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "matmul_w.glsl"

layout(std430, set = 0, binding = 1) readonly buffer W { float w[]; };

void row_dot(uint r0, uint nr, uint t0, uint nt, inout float acc[MM_RT]) {
    for (uint c = gl_LocalInvocationID.x; c < pc.cols; c += KVT_WG) {
        float wv[MM_ROWS];
        for (uint i = 0u; i < nr; i++) wv[i] = w[(r0 + i) * pc.cols + c];
        mm_fma(wv, nr, t0, nt, c, acc);
    }
}
