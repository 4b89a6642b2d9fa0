// The activation quantize passes (quant_q8_0, quant_q8_k): one invocation per
// block of one token's row x[t * cols ...], flat over the grid (kvt_flat_id),
// writing its int8 quants four to a word (the first in the low byte) at word
// i * (block / 4) of XQ, i = t * (cols / block) + the block's index, and its
// f32 scale at word xbase + i. The quantized-weight matmuls then read them
// once per block instead of quantizing a token again for every row.
#include "common.glsl"
#include "exact_div.glsl"

layout(local_size_x = KVT_WG) in;
layout(std430, set = 0, binding = 0) writeonly buffer XQ { uint xq[]; };
layout(std430, set = 0, binding = 1) readonly buffer X { float x[]; };
layout(push_constant) uniform P { uint cols; uint n_tok; uint xbase; } pc;

// a / b correctly rounded, as the CPU's division gives it, on every device:
// for normal operands with a normal quotient (every scale of a block whose
// amax is normal) by the integer long division of exact_div.glsl, the sign
// apart. Anything else (a zero, subnormal or infinite operand, a quotient
// under the normal range) takes the device's division; an fma step corrects
// it where the device's fma is fused. `precise` keeps the compiler from
// turning a / b into a * (1 / b), which can differ by an ulp.
float kvt_div(float a, float b) {
    uint ua = floatBitsToUint(a), ub = floatBitsToUint(b);
    uint ea = (ua >> 23u) & 0xffu, eb = (ub >> 23u) & 0xffu;
    if (ea != 0u && ea != 0xffu && eb != 0u && eb != 0xffu) {
        float m = kvt_div_rn(abs(a), abs(b));
        if (m != 0.0) return ((ua ^ ub) & 0x80000000u) != 0u ? -m : m;
    }
    precise float q = a / b;
    precise float err = fma(-q, b, a);
    precise float r = fma(err, 1.0 / b, q);
    return r;
}

// Packs four int8 (their low bytes) into a word, the first in the low byte.
uint kvt_pack4(int a, int b, int c, int d) {
    return uint(a & 0xff) | (uint(b & 0xff) << 8) | (uint(c & 0xff) << 16) | (uint(d & 0xff) << 24);
}
