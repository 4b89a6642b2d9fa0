// Activations to Q8_K, as the CPU engine (llama.cpp's quantize_row_q8_K)
// quantizes them for the K-quant weights: per block of 256, m = the value of
// largest magnitude (the first on ties), iscale = -127/m,
// q = min(127, round-half-even(iscale * x)), d = 1/iscale in f32, and the sum
// of each 16 q; an all-zero block is d = 0, q = 0, sums 0. Layout:
// quant_act.glsl, then the 16 sums of block i as int16 pairs (the first in
// the low half) at word xbase + n_tok * (cols / 256) + i * 8.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "quant_act.glsl"

void main() {
    uint i = kvt_flat_id(), nsb = pc.cols >> 8;
    if (i >= pc.n_tok * nsb) return;
    uint xb = i * 256u, sums = pc.xbase + pc.n_tok * nsb + i * 8u;
    float amax = 0.0, mx = 0.0;
    for (uint j = 0u; j < 256u; j++) {
        float v = x[xb + j];
        if (abs(v) > amax) {
            amax = abs(v);
            mx = v;
        }
    }
    float iscale = amax != 0.0 ? kvt_div(-127.0, mx) : 0.0;
    int gs[2] = int[2](0, 0); // the sums of the two groups of 16 that 8 words hold
    for (uint j = 0u; j < 64u; j++) {
        int q[4];
        for (uint k = 0u; k < 4u; k++) {
            precise float p = iscale * x[xb + j * 4u + k];
            q[k] = min(127, int(roundEven(p)));
            gs[(j >> 2) & 1u] += q[k];
        }
        xq[i * 64u + j] = kvt_pack4(q[0], q[1], q[2], q[3]);
        if ((j & 7u) == 7u) {
            xq[sums + (j >> 3)] = uint(gs[0] & 0xffff) | (uint(gs[1] & 0xffff) << 16);
            gs[0] = 0;
            gs[1] = 0;
        }
    }
    xq[pc.xbase + i] = floatBitsToUint(amax != 0.0 ? kvt_div(1.0, iscale) : 0.0);
}
