// Q8_0 weights as uploaded (vk_fwd.c): a slice's int8 quants, row after row,
// four to a word (the first in the low byte), then from word sbase its f16
// scales, one per block of 32, two to a word (the first in the low half), row
// after row.
//
// The activations are quantized to Q8_0 on the fly, block by block, as the
// CPU engine (and llama.cpp's CPU backend) quantizes them: d = amax/127
// rounded to f16, q = round-half-even(x * (127/amax)); each block's integer
// dot product, exact, is then scaled by d_w * d_x. So the GPU makes the same
// quantization error as the CPU, and their logits stay close. Invocation l
// takes blocks l, l + KVT_WG, ... of the row, in order, for each token.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "matmul_w.glsl"

layout(std430, set = 0, binding = 1) readonly buffer W { uint w[]; };

// Token t's block starting at column c0, quantized: its scale, and its 32 values into q.
float quant_block(uint t, uint c0, out int q[32]) {
    uint xb = t * pc.cols + c0;
    float amax = 0.0;
    for (uint i = 0u; i < 32u; i++) amax = max(amax, abs(x[xb + i]));
    // 127/amax, corrected by one fma step to the correctly rounded quotient
    // where a device's division is a few ulps off (Vulkan allows 2.5)
    precise float id = amax != 0.0 ? 127.0 / amax : 0.0;
    if (amax != 0.0) {
        precise float err = fma(-id, amax, 127.0);
        id = fma(err, 1.0 / amax, id);
    }
    for (uint i = 0u; i < 32u; i++) q[i] = int(roundEven(x[xb + i] * id));
    // amax/127 as a correctly rounded quotient too: `precise` keeps the
    // compiler from turning it into amax * (1/127), which differs by an ulp
    precise float d = amax / 127.0;
    precise float derr = fma(-d, 127.0, amax);
    d = fma(derr, 1.0 / 127.0, d);
    return kvt_round_f16(d);
}

void row_dot(uint r, uint t0, uint nt, inout float acc[MM_TOKS]) {
    uint nb = pc.cols >> 5, qb = r * (pc.cols >> 2), sb = r * nb;
    for (uint b = gl_LocalInvocationID.x; b < nb; b += KVT_WG) {
        uint s = sb + b;
        float dw = kvt_f16_to_f32((w[pc.sbase + (s >> 1)] >> ((s & 1u) * 16u)) & 0xffffu);
        for (uint k = 0u; k < nt; k++) {
            int qx[32];
            float dx = quant_block(t0 + k, b * 32u, qx);
            int isum = 0;
            for (uint j = 0u; j < 8u; j++) {
                int qw = int(w[qb + b * 8u + j]);
                for (uint i = 0u; i < 4u; i++) isum += bitfieldExtract(qw, int(i) * 8, 8) * qx[j * 4u + i];
            }
            precise float dd = dw * dx;
            precise float v = fma(float(isum), dd, acc[k]);
            acc[k] = v;
        }
    }
}
