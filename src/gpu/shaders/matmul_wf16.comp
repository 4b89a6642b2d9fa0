// f16 weights (IEEE half, two per word, rows packed back to back): invocation
// l takes columns l, l + KVT_WG, ...; each half widened exactly in integer code.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "matmul_w.glsl"

layout(std430, set = 0, binding = 1) readonly buffer W { uint w[]; };

void row_dot(uint r0, uint nr, uint t0, uint nt, inout float acc[MM_RT]) {
    for (uint c = gl_LocalInvocationID.x; c < pc.cols; c += KVT_WG) {
        float wv[MM_ROWS];
        for (uint i = 0u; i < nr; i++) {
            uint e = (r0 + i) * pc.cols + c;
            wv[i] = kvt_f16_to_f32((w[e >> 1] >> ((e & 1u) * 16u)) & 0xffffu);
        }
        mm_fma(wv, nr, t0, nt, c, acc);
    }
}
