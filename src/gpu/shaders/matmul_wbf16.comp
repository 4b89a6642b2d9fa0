// bf16 weights (two per word, rows packed back to back): invocation l takes
// columns l, l + KVT_WG, ... As the CPU engine does for BF16 weights, each
// activation is first rounded to bf16 (nearest even; a NaN stays a quiet
// NaN), so both multiply the same values; a bf16 widens to f32 exactly.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "matmul_w.glsl"

layout(std430, set = 0, binding = 1) readonly buffer W { uint w[]; };

// x rounded to the nearest bf16 value, as the CPU's kvt_f32_to_bf16, as an f32.
float kvt_round_bf16(float x) {
    uint u = floatBitsToUint(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) return uintBitsToFloat((u & 0xffff0000u) | 0x00400000u);
    return uintBitsToFloat(((u + 0x7fffu + ((u >> 16) & 1u)) >> 16) << 16);
}

void row_dot(uint r0, uint nr, uint t0, uint nt, inout float acc[MM_RT]) {
    for (uint c = gl_LocalInvocationID.x; c < pc.cols; c += KVT_WG) {
        float wv[MM_ROWS];
        for (uint i = 0u; i < nr; i++) {
            uint e = (r0 + i) * pc.cols + c;
            wv[i] = uintBitsToFloat(((w[e >> 1] >> ((e & 1u) * 16u)) & 0xffffu) << 16);
        }
        for (uint k = 0u; k < nt; k++) { // each activation rounded once for the nr rows
            float xv = kvt_round_bf16(x[(t0 + k) * pc.cols + c]);
            for (uint i = 0u; i < nr; i++) {
                precise float v = fma(wv[i], xv, acc[i * MM_TOKS + k]);
                acc[i * MM_TOKS + k] = v;
            }
        }
    }
}
