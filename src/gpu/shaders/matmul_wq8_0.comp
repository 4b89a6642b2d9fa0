// Q8_0 weights as uploaded (vk_fwd.c): a slice's int8 quants, row after row,
// four to a word (the first in the low byte), then from word sbase its f16
// scales, one per block of 32, two to a word (the first in the low half), row
// after row. Invocation l takes quant words l, l + KVT_WG, ... (4 columns
// each); a weight is d * q, exact in f32, so the sum is that of the
// dequantized row.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "matmul_w.glsl"

layout(std430, set = 0, binding = 1) readonly buffer W { uint w[]; };

void row_dot(uint r, uint t0, uint nt, inout float acc[MM_TOKS]) {
    uint nw = pc.cols >> 2, qb = r * nw, sb = r * (pc.cols >> 5);
    for (uint i = gl_LocalInvocationID.x; i < nw; i += KVT_WG) {
        uint s = sb + (i >> 3);
        float d = kvt_f16_to_f32((w[pc.sbase + (s >> 1)] >> ((s & 1u) * 16u)) & 0xffffu);
        int q = int(w[qb + i]);
        for (int k = 0; k < 4; k++) {
            precise float wv = d * float(bitfieldExtract(q, k * 8, 8));
            mm_fma(wv, t0, nt, i * 4u + uint(k), acc);
        }
    }
}
