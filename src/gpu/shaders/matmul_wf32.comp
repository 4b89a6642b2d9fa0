// f32 weights: invocation l takes columns l, l + KVT_WG, ...
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "matmul_w.glsl"

layout(std430, set = 0, binding = 1) readonly buffer W { float w[]; };

float row_dot(uint r, uint xb) {
    uint wb = r * pc.cols;
    precise float acc = 0.0;
    for (uint c = gl_LocalInvocationID.x; c < pc.cols; c += KVT_WG) acc = fma(w[wb + c], x[xb + c], acc);
    return acc;
}
