// Q8_0 weights as uploaded (vk_fwd.c): a slice's int8 quants, row after row,
// four to a word (the first in the low byte), then from word sbase its f16
// scales, one per block of 32, two to a word (the first in the low half), row
// after row.
//
// The activations are quantized to Q8_0 on the fly, block by block, as the
// CPU engine (and llama.cpp's CPU backend) quantizes them: d = amax/127
// rounded to f16, q = round-half-even(x * (127/amax)); then each block's
// integer dot product, exact, is scaled by d_w * d_x. So the GPU makes the
// same quantization error as the CPU and their logits stay close. Invocation
// l takes blocks l, l + KVT_WG, ... of the row in order.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "matmul_w.glsl"

layout(std430, set = 0, binding = 1) readonly buffer W { uint w[]; };

float row_dot(uint r, uint xb) {
    uint nb = pc.cols >> 5, qb = r * (pc.cols >> 2), sb = r * nb;
    precise float acc = 0.0;
    for (uint b = gl_LocalInvocationID.x; b < nb; b += KVT_WG) {
        uint c0 = xb + b * 32u;
        float amax = 0.0;
        for (uint i = 0; i < 32u; i++) amax = max(amax, abs(x[c0 + i]));
        float id = amax != 0.0 ? 127.0 / amax : 0.0;
        float dx = kvt_round_f16(amax / 127.0);
        uint s = sb + b;
        float dw = kvt_f16_to_f32((w[pc.sbase + (s >> 1)] >> ((s & 1u) * 16u)) & 0xffffu);
        int isum = 0;
        for (uint j = 0; j < 8u; j++) {
            int q = int(w[qb + b * 8u + j]);
            for (int k = 0; k < 4; k++) {
                int qx = int(roundEven(x[c0 + j * 4u + uint(k)] * id));
                isum += bitfieldExtract(q, k * 8, 8) * qx;
            }
        }
        precise float dd = dw * dx;
        acc = fma(float(isum), dd, acc);
    }
    return acc;
}
