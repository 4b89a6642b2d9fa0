// KV store into q8_0 pages: token t's K and V rows of one layer, every kv
// head, quantized into its page slot (meta[4t + 1], meta[4t + 2]) with the
// CPU's bytes, bit for bit (kvt_kv_q8_quantize_row in src/kernels/kv_quant.h):
// for each group of 32 values x,
//   amax = the largest |x_i| (a NaN does not raise it),
//   d    = amax / 127, correctly rounded; the page keeps f16(d), rounded to
//          nearest even in integer code (kvt_f32_to_f16),
//   q_i  = x_i * (1 / d) (id correctly rounded from the unrounded d; 0 when d
//          is 0 or infinite) rounded half away from zero, clamped to
//          [-127, 127], a NaN product giving 0.
// Both quotients are correctly rounded in integer code (kvt_div_rn). Groups whose
// amax is under 127 * 2^-126 (an f32 subnormal scale) are not the CPU's: their
// scale is taken as 0. One workgroup per token (x + z * gx); invocation l takes
// the groups l, l + KVT_WG, ... of the token's K then V rows. A page past the
// pool or a slot past the block is skipped.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#define KV_F16 0
#define KV_Q8 1
#define KV_BIND 3
#include "kv.glsl"
#include "exact_div.glsl"

layout(local_size_x = KVT_WG) in;
layout(std430, set = 0, binding = 0) readonly buffer KX { uint kx[]; };
layout(std430, set = 0, binding = 1) readonly buffer VX { uint vx[]; };
layout(std430, set = 0, binding = 2) readonly buffer M { uint meta[]; };

// roundf(v) as an int in [-127, 127]: half away from zero, a NaN 0.
int q8_of(float v) {
    if ((floatBitsToUint(v) & 0x7fffffffu) > 0x7f800000u) return 0;
    if (v >= 127.0) return 127;
    if (v <= -127.0) return -127;
    float r = trunc(v);
    precise float f = v - r; // exact
    if (abs(f) >= 0.5) r += v < 0.0 ? -1.0 : 1.0;
    return int(r);
}

float x_at(uint kv, uint i) { return uintBitsToFloat(kv == 0u ? kx[i] : vx[i]); }

// Group b of kv head g of token t's K (kv 0) or V (kv 1) row: its f16 scale
// bits, and its 32 quantized values into q.
uint quant_group(uint kv, uint t, uint g, uint b, out int q[32]) {
    uint xb = t * pc.n_head_kv * pc.head_dim + g * pc.head_dim + b * 32u;
    float amax = 0.0;
    for (uint i = 0u; i < 32u; i++) {
        float a = abs(x_at(kv, xb + i));
        if (a > amax) amax = a;
    }
    bool inf = amax > 3.4028234663852886e38;
    float d = amax == 0.0 || inf ? amax : kvt_div_rn(amax, 127.0);
    float id = d == 0.0 || inf ? 0.0 : kvt_div_rn(1.0, d);
    for (uint i = 0u; i < 32u; i++) {
        precise float v = x_at(kv, xb + i) * id;
        q[i] = q8_of(v);
    }
    return kvt_f32_to_f16(floatBitsToUint(d));
}

// Half k of a V group's 34 bytes: the scale h, then int8 pairs of q (the first in the low byte).
uint half_at(uint h, int q[32], uint k) {
    return k == 0u ? h : (uint(q[2u * k - 2u]) & 0xffu) | (uint(q[2u * k - 1u]) & 0xffu) << 8u;
}

void main() {
    uint t = gl_WorkGroupID.x + gl_WorkGroupID.z * gl_NumWorkGroups.x;
    if (t >= pc.n_tok) return; // the whole workgroup: uniform
    uint page = meta[4u * t + 1u], slot = meta[4u * t + 2u];
    if (page >= pc.n_pages || slot >= pc.block) return;
    uint c = page / pc.ppc, nb = pc.head_dim >> 5u, groups = pc.n_head_kv * nb;
    for (uint e = gl_LocalInvocationID.x; e < 2u * groups; e += KVT_WG) {
        uint kv = e / groups, g = (e % groups) / nb, b = e % nb;
        int q[32];
        uint h = quant_group(kv, t, g, b, q);
        if (kv == 0u) { // a column: the scale in row b of the scales, value i in row b * 32 + i of the int8
            uint blk = kv_block(page, 0u, g);
            kv_put_u16(c, blk + (b * pc.block + slot) * 2u, h);
            uint q0 = blk + nb * pc.block * 2u + b * 32u * pc.block + slot;
            for (uint i = 0u; i < 32u; i++) kv_put_u8(c, q0 + i * pc.block, uint(q[i]));
        } else { // a row: the scale, then the 32 int8 in order, as 17 halves from an even byte
            uint at = kv_v_at(page, g, slot) + b * 34u, k = 0u;
            if ((at & 2u) != 0u) kv_put_u16(c, at, h), k = 1u; // a word shared with the bytes before
            for (; k + 1u < 17u; k += 2u) // words of this group alone
                kv_put_word(c, (at + 2u * k) >> 2u, half_at(h, q, k) | half_at(h, q, k + 1u) << 16u);
            if (k < 17u) kv_put_u16(c, at + 2u * k, half_at(h, q, k)); // shared with the bytes after
        }
    }
}
