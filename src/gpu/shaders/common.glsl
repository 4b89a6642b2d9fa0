// Included by every kvtier compute shader. The determinism rules they follow,
// so that a result depends only on its own inputs, never on how work is split:
//
// 1. Every accumulation is `precise` and written with an explicit fma(), so the
//    compiler neither fuses nor splits it differently from one build, driver
//    or batch size to the next.
// 2. A reduction is a fixed tree over KVT_WG invocations of one workgroup:
//    invocation l first sums elements l, l + KVT_WG, l + 2*KVT_WG, ... in that
//    order, then the KVT_WG partial sums are halved pairwise through shared
//    memory. It never uses subgroup operations or gl_SubgroupSize, so the
//    order is the same on every device.
// 3. One kernel per op for every batch size: the batch is one more workgroup
//    dimension and only says how many tokens run, never how a token's own sums
//    are ordered. So a decode step (one token) gives bit for bit what the
//    prefill of a longer batch gives for the same token.
#define KVT_WG 64

shared float kvt_part[KVT_WG];

// Sums v over the workgroup with the fixed tree of rule 2; every invocation
// gets the total. Call from uniform control flow.
float kvt_wg_sum(float v) {
    uint l = gl_LocalInvocationID.x;
    kvt_part[l] = v;
    barrier();
    for (uint s = KVT_WG / 2; s > 0; s >>= 1) {
        if (l < s) {
            precise float t = kvt_part[l] + kvt_part[l + s];
            kvt_part[l] = t;
        }
        barrier();
    }
    float total = kvt_part[0];
    barrier(); // kvt_part may be reused after every invocation has read the total
    return total;
}

// The largest of v over the workgroup by the same fixed tree (max is exact, so
// any order gives the same bits; the tree keeps it in step with kvt_wg_sum).
float kvt_wg_max(float v) {
    uint l = gl_LocalInvocationID.x;
    kvt_part[l] = v;
    barrier();
    for (uint s = KVT_WG / 2; s > 0; s >>= 1) {
        if (l < s) kvt_part[l] = max(kvt_part[l], kvt_part[l + s]);
        barrier();
    }
    float m = kvt_part[0];
    barrier();
    return m;
}

// v >> shift rounded to nearest, ties to even (shift 1..31).
uint kvt_shift_rne(uint v, uint shift) {
    uint q = v >> shift, rem = v & ((1u << shift) - 1u), mid = 1u << (shift - 1u);
    if (rem > mid || (rem == mid && (q & 1u) != 0u)) q++;
    return q;
}

// The f16 bits of the f32 with bits u, rounded to nearest even in integer code,
// as the CPU's kvt_f32_to_f16: NaN stays NaN (quieted, top of the payload
// kept), overflow is inf, f16 subnormals round correctly, f32 subnormals are 0.
// A hardware conversion's rounding is not specified, so none is used.
uint kvt_f32_to_f16(uint u) {
    uint sign = (u & 0x80000000u) >> 16;
    u &= 0x7fffffffu;
    if (u > 0x7f800000u) return sign | 0x7e00u | ((u >> 13) & 0x3ffu);
    if (u >= 0x477ff000u) return sign | 0x7c00u;
    if (u >= 0x38800000u) return sign | kvt_shift_rne(u - (112u << 23), 13u); // a carry may bump the exponent
    uint e = u >> 23;
    if (e == 0u) return sign;
    uint shift = 126u - e; // units of 2^-24: value = mant >> shift
    if (shift > 24u) return sign;
    return sign | kvt_shift_rne((u & 0x7fffffu) | 0x800000u, shift);
}

// The f32 of f16 bits h, exactly (subnormals too, whatever the device's
// float16 denormal mode).
float kvt_f16_to_f32(uint h) {
    uint sign = (h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0u) return uintBitsToFloat(sign | floatBitsToUint(float(m) * 5.9604644775390625e-8));
    if (e == 31u) return uintBitsToFloat(sign | 0x7f800000u | (m << 13));
    return uintBitsToFloat(sign | ((e + 112u) << 23) | (m << 13));
}

// x rounded to the nearest f16 value, as an f32.
float kvt_round_f16(float x) { return kvt_f16_to_f32(kvt_f32_to_f16(floatBitsToUint(x))); }

// The flat index of invocation l of a 1-D grid spread over x and z (the host's spread()).
uint kvt_flat_id() {
    return (gl_WorkGroupID.x + gl_WorkGroupID.z * gl_NumWorkGroups.x) * KVT_WG + gl_LocalInvocationID.x;
}
