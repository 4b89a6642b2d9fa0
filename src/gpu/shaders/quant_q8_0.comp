// Activations to Q8_0, as the CPU engine (and llama.cpp's CPU backend)
// quantizes them for Q8_0, Q4_0, Q5_0 and IQ4_NL weights: per block of 32,
// d = amax/127 rounded to f16, q = round-half-even(x * (127/amax)); an
// all-zero block is d = 0, q = 0. Layout: quant_act.glsl, then each block's
// Q8_1 sum, which Q4_1 and Q5_1 weights also take: s = (the sum of its q) *
// (amax/127 unrounded), rounded to f16, as an f32 at word
// xbase + n_tok * (cols / 32) + i.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "quant_act.glsl"

void main() {
    uint i = kvt_flat_id(), nb = pc.cols >> 5;
    if (i >= pc.n_tok * nb) return;
    uint xb = i * 32u; // token t's block b starts at t * cols + b * 32 = i * 32
    float amax = 0.0;
    for (uint j = 0u; j < 32u; j++) amax = max(amax, abs(x[xb + j]));
    float id = amax != 0.0 ? kvt_div(127.0, amax) : 0.0, d = kvt_div(amax, 127.0);
    int sum = 0;
    for (uint j = 0u; j < 8u; j++) {
        int q[4];
        for (uint k = 0u; k < 4u; k++) {
            q[k] = int(roundEven(x[xb + j * 4u + k] * id));
            sum += q[k];
        }
        xq[i * 8u + j] = kvt_pack4(q[0], q[1], q[2], q[3]);
    }
    xq[pc.xbase + i] = floatBitsToUint(kvt_round_f16(d));
    precise float s = float(sum) * d;
    xq[pc.xbase + pc.n_tok * nb + i] = floatBitsToUint(kvt_round_f16(s));
}
