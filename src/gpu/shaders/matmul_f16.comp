// y[t][r] = sum_c w[r][c] * x[t][c]: weights in f16 rows (IEEE half, two per
// 32-bit word, as the CPU engine stores them), activations and results f32,
// f32 accumulation. One workgroup per (row, token): groups (gx, n_tok, gz)
// with row = x + z * gx, so more rows than one dimension allows still fit.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = KVT_WG) in;
layout(std430, set = 0, binding = 0) writeonly buffer Y { float y[]; };
layout(std430, set = 0, binding = 1) readonly buffer W { uint w[]; };
layout(std430, set = 0, binding = 2) readonly buffer X { float x[]; };
layout(push_constant) uniform P { uint rows; uint cols; uint n_tok; } pc;

void main() {
    uint r = gl_WorkGroupID.x + gl_WorkGroupID.z * gl_NumWorkGroups.x;
    uint t = gl_WorkGroupID.y;
    if (r >= pc.rows) return; // the whole workgroup: uniform
    uint wb = r * pc.cols, xb = t * pc.cols;
    precise float acc = 0.0;
    for (uint c = gl_LocalInvocationID.x; c < pc.cols; c += KVT_WG) {
        uint i = wb + c;
        vec2 pair = unpackHalf2x16(w[i >> 1]);
        float wv = (i & 1u) == 0u ? pair.x : pair.y;
        acc = fma(wv, x[xb + c], acc);
    }
    float total = kvt_wg_sum(acc);
    if (gl_LocalInvocationID.x == 0) y[t * pc.rows + r] = total;
}
