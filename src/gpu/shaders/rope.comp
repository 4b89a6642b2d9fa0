// In place over n_tok rows of n_heads * head_dim: rotates the pairs of the
// leading rope_dim dims of every head by the row's host-computed angles, one
// invocation per (token, head, pair) on a flat grid (kvt_flat_id). NORM pairs
// (2i, 2i+1), NEOX (i, i + rope_dim/2); (a, b) becomes
// (fma(a, c, -(b * s)), fma(a, s, b * c)), as the CPU's rope.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = KVT_WG) in;
layout(std430, set = 0, binding = 0) buffer XB { float x[]; };
layout(std430, set = 0, binding = 1) readonly buffer C { float cs[]; };
layout(std430, set = 0, binding = 2) readonly buffer S { float sn[]; };
layout(push_constant) uniform P { uint n_heads; uint head_dim; uint rope_dim; uint neox; uint n_tok; } pc;

void main() {
    uint half_dim = pc.rope_dim / 2u, id = kvt_flat_id();
    if (id >= pc.n_tok * pc.n_heads * half_dim) return;
    uint i = id % half_dim, h = (id / half_dim) % pc.n_heads, t = id / (half_dim * pc.n_heads);
    uint base = (t * pc.n_heads + h) * pc.head_dim;
    uint ia = base + (pc.neox != 0u ? i : 2u * i), ib = base + (pc.neox != 0u ? i + half_dim : 2u * i + 1u);
    float c = cs[t * half_dim + i], s = sn[t * half_dim + i], a = x[ia], b = x[ib];
    precise float bs = b * s;
    precise float bc = b * c;
    precise float na = fma(a, c, -bs);
    precise float nb = fma(a, s, bc);
    x[ia] = na;
    x[ib] = nb;
}
