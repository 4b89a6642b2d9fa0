// Exact division for shaders that must give the CPU's bits (the KV store into
// q8_0 pages, the activation quantize passes).
// a / b correctly rounded (to nearest, ties to even), for a, b > 0 normal,
// by long division of the significands in integer code: a device's division
// may be ulps off and its fma() need not be fused, so neither can give the
// CPU's quotient on every device. A quotient under the normal range is 0,
// one over it +infinity.
float kvt_div_rn(float a, float b) {
    uint ua = floatBitsToUint(a), ub = floatBitsToUint(b);
    uint ma = (ua & 0x7fffffu) | 0x800000u, mb = (ub & 0x7fffffu) | 0x800000u;
    int e = int(ua >> 23u) - int(ub >> 23u);
    if (ma < mb) ma <<= 1u, e -= 1; // ma / mb in [1, 2)
    uint q = 0u, rem = ma;          // rem < 2 mb < 2^25 throughout
    for (int i = 0; i < 24; i++) {
        q <<= 1u;
        if (rem >= mb) rem -= mb, q |= 1u;
        rem <<= 1u;
    }
    if (rem > mb || (rem == mb && (q & 1u) != 0u)) q++; // rem / 2 is the remainder: against mb / 2
    if (q == 0x1000000u) q >>= 1u, e += 1;
    e += 127;
    if (e <= 0) return 0.0;
    if (e >= 255) return uintBitsToFloat(0x7f800000u);
    return uintBitsToFloat(uint(e) << 23u | (q & 0x7fffffu));
}
