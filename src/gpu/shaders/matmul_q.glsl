// The matmuls of quantized weights (matmul_w.glsl's frame), reading the
// activations that a quantize pass wrote (quant_act.glsl) from binding 2:
// Q8_0 blocks of 32 for Q8_0, Q4_0, Q5_0 and IQ4_NL weights, the same with
// their Q8_1 block sums for Q4_1 and Q5_1, Q8_K blocks of 256 for the K
// types and IQ4_XS, as the CPU engine pairs them. The includer defines MM_TYPE and,
// where the device has integer dot products, KVT_SDOT.
//
// Weights as vk_fwd.c uploads a slice: from word 0 each block's codes (CW
// words per block, row after row), then from word sbase each block's scales
// (Q8_0, Q4_0, Q5_0, IQ4_NL: the f16 d, two blocks to a word; Q4_1, Q5_1:
// d then the min m, a word a block; Q4_K, Q5_K: the block's first 16 bytes,
// d, dmin and the twelve bytes of 6-bit scales and mins; Q6_K: the 16 int8
// scales, then d, in 5 words; Q3_K: the 12 bytes of 6-bit scales, then d, in
// 4 words; Q2_K: d and dmin in one word, its 16 scale bytes being the last
// 4 code words; IQ4_XS: d and scales_h in one word, then scales_l).
//
// Per block the integer dot product of weight codes and activation quants is
// exact, so its order does not matter and the OpSDot path and the plain
// integer path give the same bits. Each block then meets the f32 sum as the
// CPU engine's canonical dot (src/kernels/ops.h) does: the blocks of 32
// acc = fma(float(isum), d_w * d_x, acc), then for Q4_1 and Q5_1
// acc = fma(m, s_x, acc) with s_x the activations' Q8_1 block sum; the K
// types two integers per super-block,
// S = sum_g sc[g] * (sum_g(u * q) - off * bsum[g]) and
// M = sum_g mn[g] * bsum[g], then acc = fma(float(S), d * d_x, acc) and, with
// mins, acc = fma(-float(M), dmin * d_x, acc). Invocation l takes blocks l,
// l + KVT_WG, ... in order, for each row and token of its workgroup, loading
// each activation block once for all the rows; the fixed tree sums the shares.
#define MM_XQ
#define MM_Q8_0 1
#define MM_Q4_0 2
#define MM_Q5_0 3
#define MM_Q4_1 4
#define MM_Q5_1 5
#define MM_IQ4_NL 6 // the last of the blocks of 32
#define MM_Q2_K 7
#define MM_Q3_K 8
#define MM_Q4_K 9
#define MM_Q5_K 10
#define MM_Q6_K 11
#define MM_IQ4_XS 12
#include "common.glsl"
#include "matmul_w.glsl"

layout(std430, set = 0, binding = 1) readonly buffer W { uint w[]; };
layout(std430, set = 0, binding = 2) readonly buffer XQ { uint xq[]; };

#ifdef KVT_SDOT
// OpSDot (SPV_KHR_integer_dot_product) on four packed int8 (format 0).
spirv_instruction(extensions = ["SPV_KHR_integer_dot_product"], capabilities = [6019, 6018], id = 4450)
int kvt_sdot(uint a, uint b, spirv_literal int fmt);
int kvt_dot4(uint a, uint b) { return kvt_sdot(a, b, 0); }
#else
int kvt_dot4(uint a, uint b) {
    int s = 0;
    for (int i = 0; i < 4; i++) s += bitfieldExtract(int(a), i * 8, 8) * bitfieldExtract(int(b), i * 8, 8);
    return s;
}
#endif

// Each byte v (0..127) of a word minus z (8 or 16), as int8, without a
// borrow crossing bytes.
uint kvt_sub_bytes(uint v, uint z) { return ((v | 0x80808080u) - z * 0x01010101u) ^ 0x80808080u; }

// Byte i of the weights from word base.
uint w_byte(uint base, uint i) { return (w[base + (i >> 2)] >> ((i & 3u) * 8u)) & 0xffu; }

#if MM_TYPE == MM_IQ4_NL || MM_TYPE == MM_IQ4_XS
// IQ4_NL's code book (quant_legacy.h) as int8, four to a word, code 0 in the low byte.
const uint IQ4NL[4] = uint[4](0xbfad9881u, 0xf6eaddcfu, 0x26190d01u, 0x71594535u);

// Each byte of v (a code 0..15) mapped through the code book.
uint iq4nl_bytes(uint v) {
    uint r = 0u;
    for (uint i = 0u; i < 4u; i++) {
        uint c = (v >> (8u * i)) & 15u;
        r |= ((IQ4NL[c >> 2] >> (8u * (c & 3u))) & 0xffu) << (8u * i);
    }
    return r;
}
#endif

#if MM_TYPE <= MM_IQ4_NL
#if MM_TYPE == MM_Q8_0
#define CW 8u
#elif MM_TYPE == MM_Q5_0 || MM_TYPE == MM_Q5_1
#define CW 5u
#else
#define CW 4u
#endif
#if MM_TYPE == MM_Q4_1 || MM_TYPE == MM_Q5_1
#define MM_MIN 1
#define MM_ZERO 0u // the codes are the integers
#elif MM_TYPE == MM_Q5_0
#define MM_ZERO 16u
#else
#define MM_ZERO 8u
#endif

// Bits 0..3 of b spread to bit 0 of each byte.
uint spread4(uint b) { return (b & 1u) | ((b & 2u) << 7) | ((b & 4u) << 14) | ((b & 8u) << 21); }

// Block s's 32 weights as int8, four to a word in element order.
void load_block(uint s, out uint q[8]) {
    uint c = s * CW;
#if MM_TYPE == MM_Q8_0
    for (uint j = 0u; j < 8u; j++) q[j] = w[c + j];
#elif MM_TYPE == MM_Q4_0 || MM_TYPE == MM_Q4_1 || MM_TYPE == MM_IQ4_NL
    for (uint j = 0u; j < 4u; j++) { // element j < 16 is the low nibble of byte j, element j + 16 its high
        uint v = w[c + j];
#if MM_TYPE == MM_IQ4_NL
        q[j] = iq4nl_bytes(v & 0x0f0f0f0fu);
        q[j + 4u] = iq4nl_bytes((v >> 4) & 0x0f0f0f0fu);
#else
        q[j] = kvt_sub_bytes(v & 0x0f0f0f0fu, MM_ZERO);
        q[j + 4u] = kvt_sub_bytes((v >> 4) & 0x0f0f0f0fu, MM_ZERO);
#endif
    }
#else
    uint qh = w[c + 4u]; // bit i is bit 4 of element i
    for (uint j = 0u; j < 4u; j++) {
        uint v = w[c + j];
        q[j] = kvt_sub_bytes((v & 0x0f0f0f0fu) | (spread4(qh >> (4u * j)) << 4), MM_ZERO);
        q[j + 4u] = kvt_sub_bytes(((v >> 4) & 0x0f0f0f0fu) | (spread4(qh >> (16u + 4u * j)) << 4), MM_ZERO);
    }
#endif
}

// Invocation l takes blocks b = l, l + KVT_WG, ... of each row: it loads the
// nr rows' weights of block b, then each token's activation block once for
// all of them.
void row_dot(uint r0, uint nr, uint t0, uint nt, inout float acc[MM_RT]) {
    uint nb = pc.cols >> 5;
    for (uint b = gl_LocalInvocationID.x; b < nb; b += KVT_WG) {
        uint q[MM_ROWS * 8u];
        float dw[MM_ROWS];
#ifdef MM_MIN
        float mw[MM_ROWS];
#endif
        for (uint i = 0u; i < nr; i++) {
            uint s = (r0 + i) * nb + b, qi[8];
#ifdef MM_MIN
            uint dm = w[pc.sbase + s];
            dw[i] = kvt_f16_to_f32(dm & 0xffffu);
            mw[i] = kvt_f16_to_f32(dm >> 16);
#else
            dw[i] = kvt_f16_to_f32((w[pc.sbase + (s >> 1)] >> ((s & 1u) * 16u)) & 0xffffu);
#endif
            load_block(s, qi);
            for (uint j = 0u; j < 8u; j++) q[i * 8u + j] = qi[j];
        }
        for (uint k = 0u; k < nt; k++) {
            uint xb = (t0 + k) * nb + b, xw[8];
            for (uint j = 0u; j < 8u; j++) xw[j] = xq[xb * 8u + j];
            float dx = uintBitsToFloat(xq[pc.xbase + xb]);
#ifdef MM_MIN
            float sx = uintBitsToFloat(xq[pc.xbase + pc.n_tok * nb + xb]);
#endif
            for (uint i = 0u; i < nr; i++) {
                int isum = 0;
                for (uint j = 0u; j < 8u; j++) isum += kvt_dot4(q[i * 8u + j], xw[j]);
                precise float dd = dw[i] * dx;
                precise float v = fma(float(isum), dd, acc[i * MM_TOKS + k]);
#ifdef MM_MIN
                v = fma(mw[i], sx, v);
#endif
                acc[i * MM_TOKS + k] = v;
            }
        }
    }
}

#else // the K types: super-blocks of 256

// Group g's sum of activation quants (int16) of Q8_K block xs.
int bsum(uint xs, uint g) {
    uint nsb = pc.cols >> 8;
    return bitfieldExtract(int(xq[pc.xbase + pc.n_tok * nsb + xs * 8u + (g >> 1)]), int(g & 1u) * 16, 16);
}

// A super-block's 256 weights are 8 parts of 32: Q4_K and Q5_K's sub-blocks
// (a 6-bit scale and min each), the groups 2j and 2j + 1 of Q2_K, Q3_K and
// Q6_K. kq_load gives part j's 32 codes (8 words, group 2j's then 2j + 1's,
// in the order of the activations' words 8j .. 8j + 7 of a Q8_K block) and
// each group's scale and min; kq_dot, the part's share of S and M against
// those activation words and the groups' sums bs:
// S = sum_g sc[g] * (sum_g(code * q) - KQ_OFF * bs[g]), M = sum_g mn[g] * bs[g]
// (Q4_K and Q5_K give both groups their sub-block's scale and min).
#if MM_TYPE == MM_Q2_K || MM_TYPE == MM_Q3_K
#if MM_TYPE == MM_Q2_K
#define CW 20u // qs[64], then scales[16] (a scale in the low nibble, a min in the high, per group)
#define MW 1u  // d, dmin (f16)
#define KQ_OFF 0
#else
#define CW 24u // qs[64], then hmask[32]
#define MW 4u  // scales[12] (sixteen 6-bit scales biased by 32), then d
#define KQ_OFF 4
#endif

void kq_load(uint s, uint j, out uint code[8], out int sc[2], out int mn[2]) {
    uint cb = s * CW;
    // weight 32j + l: bits 2(j % 4) of qs[32(j / 4) + l] (Q3_K: bit j of hmask[l] is bit 2)
    uint h = j >> 2, sh = 2u * (j & 3u);
    for (uint i = 0u; i < 8u; i++) {
        code[i] = (w[cb + 8u * h + i] >> sh) & 0x03030303u;
#if MM_TYPE == MM_Q3_K
        code[i] |= ((w[cb + 16u + i] >> j) & 0x01010101u) << 2;
#endif
    }
    for (uint g = 0u; g < 2u; g++) {
        uint gg = 2u * j + g;
#if MM_TYPE == MM_Q2_K
        uint sb = w_byte(cb + 16u, gg);
        sc[g] = int(sb & 15u);
        mn[g] = int(sb >> 4);
#else
        uint mb = pc.sbase + s * MW;
        // group g's low 4 bits: nibble g / 8 of byte g % 8; its high 2: bits 2(g / 4) of byte 8 + g % 4
        uint lo = (w_byte(mb, gg & 7u) >> (4u * (gg >> 3))) & 15u, hi = (w_byte(mb, 8u + (gg & 3u)) >> (2u * (gg >> 2))) & 3u;
        sc[g] = int(lo | (hi << 4)) - 32;
        mn[g] = 0;
#endif
    }
}
#elif MM_TYPE == MM_IQ4_XS
#define CW 32u // qs[128]
#define MW 2u  // d (f16) and scales_h (u16), then scales_l[4]
#define KQ_OFF 0 // the codes are the book's int8 values

void kq_load(uint s, uint j, out uint code[8], out int sc[2], out int mn[2]) {
    uint cb = s * CW, mb = pc.sbase + s * MW;
    // part j is sub-block j: weight 32j + l takes nibble l / 16 of qs[16j + l % 16]
    for (uint i = 0u; i < 4u; i++) {
        uint v = w[cb + 4u * j + i];
        code[i] = iq4nl_bytes(v & 0x0f0f0f0fu);
        code[i + 4u] = iq4nl_bytes((v >> 4) & 0x0f0f0f0fu);
    }
    // its 6-bit scale: nibble j % 2 of scales_l[j / 2], bits 2j..2j+1 of scales_h as bits 4-5
    uint lo = (w_byte(mb + 1u, j >> 1) >> (4u * (j & 1u))) & 15u, hi = (w[mb] >> (16u + 2u * j)) & 3u;
    sc[0] = sc[1] = int(lo | (hi << 4)) - 32;
    mn[0] = mn[1] = 0;
}
#elif MM_TYPE == MM_Q6_K
#define CW 48u // ql[128], then qh[64]
#define MW 5u  // scales[16] (int8), then d
#define KQ_OFF 32

void kq_load(uint s, uint j, out uint code[8], out int sc[2], out int mn[2]) {
    uint cb = s * CW, mb = pc.sbase + s * MW;
    for (uint e = 0u; e < 2u; e++) {
        uint g = 2u * j + e;
        // weight i = 128h + 32p + l: nibble p/2 of ql[64h + 32(p%2) + l], bits 2p of qh[32h + l]
        uint h = g >> 3, p = (g & 7u) >> 1, wb = (g & 1u) * 4u;
        for (uint i = 0u; i < 4u; i++) {
            uint ql = w[cb + 16u * h + 8u * (p & 1u) + wb + i], qh = w[cb + 32u + 8u * h + wb + i];
            code[4u * e + i] = ((ql >> (4u * (p >> 1))) & 0x0f0f0f0fu) | (((qh >> (2u * p)) & 0x03030303u) << 4);
        }
        sc[e] = bitfieldExtract(int(w_byte(mb, g)), 0, 8);
        mn[e] = 0;
    }
}
#else
#if MM_TYPE == MM_Q4_K
#define CW 32u // qs[128]
#else
#define CW 40u // qs[128], then qh[32]
#endif
#define MW 4u // d, dmin (f16), scales[12]
#define KQ_OFF 0

void kq_load(uint s, uint j, out uint code[8], out int sc[2], out int mn[2]) {
    uint cb = s * CW, mb = pc.sbase + s * MW;
    // weight 64c + 32h + l: nibble h of qs[32c + l] (Q5_K: bit 2c + h of qh[l])
    uint c = j >> 1, h = j & 1u;
    for (uint i = 0u; i < 8u; i++) {
        code[i] = (w[cb + 8u * c + i] >> (4u * h)) & 0x0f0f0f0fu;
#if MM_TYPE == MM_Q5_K
        code[i] |= ((w[cb + 32u + i] >> (2u * c + h)) & 0x01010101u) << 4;
#endif
    }
    uint scl, mnl;
    if (j < 4u) {
        scl = w_byte(mb, 4u + j) & 63u;
        mnl = w_byte(mb, 8u + j) & 63u;
    } else {
        scl = (w_byte(mb, 8u + j) & 15u) | ((w_byte(mb, j) >> 6) << 4);
        mnl = (w_byte(mb, 8u + j) >> 4) | ((w_byte(mb, 4u + j) >> 6) << 4);
    }
    sc[0] = sc[1] = int(scl);
    mn[0] = mn[1] = int(mnl);
}
#endif

#if MM_TYPE != MM_Q6_K && MM_TYPE != MM_Q3_K && MM_TYPE != MM_IQ4_XS
#define KQ_MIN 1
#endif

// Part shares as integers: exact, so the grouping of the sums does not matter.
int kq_dot(uint code[8], int sc[2], int mn[2], uint xw[8], int bs[2], out int M) {
    int S = 0;
    M = 0;
    for (uint g = 0u; g < 2u; g++) {
        int is = 0;
        for (uint i = 4u * g; i < 4u * g + 4u; i++) is += kvt_dot4(code[i], xw[i]);
        S += sc[g] * (is - KQ_OFF * bs[g]);
        M += mn[g] * bs[g];
    }
    return S;
}

// The shares of S meet in mm_part (the frame's trees use it only after
// row_dot), those of M in kq_m.
#ifdef KQ_MIN
shared uint kq_m[MM_RT][KVT_WG];
#endif

// Invocations 8q .. 8q + 7 take the 8 parts of super-blocks q, q + KVT_WG/8,
// ... of the rows; each loads its part of the nr rows' weights, then each
// token's activation words once for all of them. Their shares of S and M
// (integers, so exact in any order) meet in shared memory, and invocation 8q
// does that super-block's fmas for each (row, token). So a row of few
// super-blocks still keeps every invocation busy.
void row_dot(uint r0, uint nr, uint t0, uint nt, inout float acc[MM_RT]) {
    uint nsb = pc.cols >> 8, l = gl_LocalInvocationID.x, per = KVT_WG / 8u, j = l & 7u;
    for (uint b0 = 0u; b0 < nsb; b0 += per) { // the same trip count in every invocation: barriers are uniform
        uint b = b0 + (l >> 3);
        if (b < nsb) {
            uint code[MM_ROWS * 8u];
            int sc[MM_ROWS * 2u], mn[MM_ROWS * 2u];
            for (uint i = 0u; i < nr; i++) {
                uint c8[8];
                int s2[2], m2[2];
                kq_load((r0 + i) * nsb + b, j, c8, s2, m2);
                for (uint e = 0u; e < 8u; e++) code[i * 8u + e] = c8[e];
                for (uint g = 0u; g < 2u; g++) sc[i * 2u + g] = s2[g], mn[i * 2u + g] = m2[g];
            }
            for (uint k = 0u; k < nt; k++) {
                uint xs = (t0 + k) * nsb + b, xw[8];
                for (uint e = 0u; e < 8u; e++) xw[e] = xq[xs * 64u + 8u * j + e];
                int bs[2] = int[2](bsum(xs, 2u * j), bsum(xs, 2u * j + 1u));
                for (uint i = 0u; i < nr; i++) {
                    uint c8[8];
                    for (uint e = 0u; e < 8u; e++) c8[e] = code[i * 8u + e];
                    int M, S = kq_dot(c8, int[2](sc[i * 2u], sc[i * 2u + 1u]), int[2](mn[i * 2u], mn[i * 2u + 1u]), xw,
                                      bs, M);
                    mm_part[i * MM_TOKS + k][l] = uint(S);
#ifdef KQ_MIN
                    kq_m[i * MM_TOKS + k][l] = uint(M);
#endif
                }
            }
        }
        barrier();
        if (b < nsb && j == 0u) {
            for (uint i = 0u; i < nr; i++) {
                uint s = (r0 + i) * nsb + b;
#if MM_TYPE == MM_IQ4_XS
                float d = kvt_f16_to_f32(w[pc.sbase + s * MW] & 0xffffu); // d before the scales
#elif MM_TYPE == MM_Q6_K || MM_TYPE == MM_Q3_K
                float d = kvt_f16_to_f32(w[pc.sbase + s * MW + MW - 1u] & 0xffffu); // d after the scales
#else
                uint m0 = w[pc.sbase + s * MW];
                float d = kvt_f16_to_f32(m0 & 0xffffu), dmin = kvt_f16_to_f32(m0 >> 16);
#endif
                for (uint k = 0u; k < nt; k++) {
                    uint a = i * MM_TOKS + k;
                    int S = 0, M = 0;
                    for (uint e = 0u; e < 8u; e++) {
                        S += int(mm_part[a][l + e]);
#ifdef KQ_MIN
                        M += int(kq_m[a][l + e]);
#endif
                    }
                    float dx = uintBitsToFloat(xq[pc.xbase + (t0 + k) * nsb + b]);
                    precise float dd = d * dx;
                    precise float v = fma(float(S), dd, acc[a]);
#ifdef KQ_MIN
                    precise float dm = dmin * dx;
                    v = fma(-float(M), dm, v);
#endif
                    acc[a] = v;
                }
            }
        }
        barrier();
    }
}
#endif
