// f16 weights (IEEE half, two per word, rows packed back to back): invocation
// l takes columns l, l + KVT_WG, ...; each half widened exactly in integer code.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "matmul_w.glsl"

layout(std430, set = 0, binding = 1) readonly buffer W { uint w[]; };

float row_dot(uint r, uint xb) {
    uint wb = r * pc.cols;
    precise float acc = 0.0;
    for (uint c = gl_LocalInvocationID.x; c < pc.cols; c += KVT_WG) {
        uint i = wb + c;
        float wv = kvt_f16_to_f32((w[i >> 1] >> ((i & 1u) * 16u)) & 0xffffu);
        acc = fma(wv, x[xb + c], acc);
    }
    return acc;
}
