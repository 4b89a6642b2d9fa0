// SPDX-License-Identifier: MIT
/* K-quant weights (ggml types Q2_K, Q3_K, Q4_K, Q5_K, Q6_K; ids 10..14) and
 * IQ4_XS (id 23), which shares their super-blocks and Q8_K activations:
 * super-blocks of 256 weights, their byte layouts, dequantization, the Q8_K
 * activations the matmul takes, the scalar (canonical) matmul, and the weight
 * quantizers (quant_k_fit.c).
 *
 * Byte layouts of one super-block (little-endian f16 scales; facts of the
 * GGUF format, learned from ggml-common.h):
 *   Q2_K  84 B: scales[16] (low nibble scale, high nibble min, per 16 weights),
 *               qs[64] (2-bit codes), d (f16), dmin (f16)
 *   Q3_K 110 B: hmask[32] (code bit 2), qs[64] (code bits 0-1), scales[12]
 *               (sixteen 6-bit scales, biased by 32), d (f16)
 *   Q4_K 144 B: d, dmin (f16), scales[12] (eight 6-bit scales and eight 6-bit
 *               mins, per 32 weights), qs[128] (4-bit codes)
 *   Q5_K 176 B: d, dmin, scales[12] as Q4_K, qh[32] (code bit 4), qs[128]
 *   Q6_K 210 B: ql[128] (code bits 0-3), qh[64] (bits 4-5), scales[16]
 *               (int8, per 16 weights), d (f16)
 *   IQ4_XS 136 B: d (f16), scales_h (u16: bits 4-5 of each 6-bit scale),
 *               scales_l[4] (their bits 0-3), qs[128] (4-bit indices into
 *               IQ4_NL's 16-value code book, quant_legacy.h); eight sub-blocks
 *               of 32, scale = stored 6-bit value - 32
 * Where each weight's bits sit is spelled out once, in quant_k.c's unpack.
 *
 * Every type reduces to one unpacked form per super-block (kvt_qk_block):
 * group g (16 weights, g = 0..15) has an integer scale sc[g] and min mn[g],
 * weight i an unsigned code u[i], and
 *     w[i] = (d * sc[g]) * (u[i] - off) - dmin * mn[g],   g = i / 16,
 * with off = 4 (Q3_K), 32 (Q6_K), 128 (IQ4_XS), else 0, and mn = 0 for the
 * symmetric types Q3_K, Q6_K and IQ4_XS. IQ4_XS's code is its code book value
 * + 128 (1..241), so u - off is the value itself. The matmul and the
 * dequantization both start from it. */
#ifndef KVT_QUANT_K_H
#define KVT_QUANT_K_H

#include <stddef.h>
#include <stdint.h>

#include "ops.h"

#define KVT_QK 256      /* weights per super-block */
#define KVT_QK_GROUP 16 /* weights per group (scale granularity of the unpacked form) */
#define KVT_QK_NGROUP (KVT_QK / KVT_QK_GROUP)
#define KVT_Q8K_MAX 127 /* Q8_K activations lie in [-127, 127] */

/* Byte offsets inside a super-block, per type (the layouts above). */
#define KVT_Q2K_SCALES 0
#define KVT_Q2K_QS 16
#define KVT_Q2K_D 80
#define KVT_Q2K_DMIN 82
#define KVT_Q3K_HMASK 0
#define KVT_Q3K_QS 32
#define KVT_Q3K_SCALES 96
#define KVT_Q3K_D 108
#define KVT_Q45K_D 0
#define KVT_Q45K_DMIN 2
#define KVT_Q45K_SCALES 4
#define KVT_Q4K_QS 16
#define KVT_Q5K_QH 16
#define KVT_Q5K_QS 48
#define KVT_Q6K_QL 0
#define KVT_Q6K_QH 128
#define KVT_Q6K_SCALES 192
#define KVT_Q6K_D 208
#define KVT_IQ4XS_D 0
#define KVT_IQ4XS_SCALES_H 2
#define KVT_IQ4XS_SCALES_L 4
#define KVT_IQ4XS_QS 8


typedef struct {
    uint8_t u[KVT_QK]; /* codes: Q2_K 0..3, Q3_K 0..7, Q4_K 0..15, Q5_K 0..31, Q6_K 0..63, IQ4_XS 1..241 */
    int16_t sc[KVT_QK_NGROUP];
    int16_t mn[KVT_QK_NGROUP];
    float d, dmin; /* f16 values widened; dmin = 0 for Q3_K, Q6_K, IQ4_XS */
} kvt_qk_block;

/* 1 for Q2_K..Q6_K and IQ4_XS (the types this header handles). */
int kvt_qk_is_k(uint32_t type);
/* Bytes of one super-block (0 if not a K type). */
size_t kvt_qk_block_bytes(uint32_t type);
/* The code offset `off` of the formula above (0, 4, 32 or 128). */
int kvt_qk_code_offset(uint32_t type);
/* 1 if the type has mins (Q2_K, Q4_K, Q5_K). */
int kvt_qk_has_min(uint32_t type);

/* Scales only (sc, mn, d, dmin) / the whole block, of super-block blk. */
void kvt_qk_unpack_scales(uint32_t type, const uint8_t *blk, kvt_qk_block *out);
void kvt_qk_unpack(uint32_t type, const uint8_t *blk, kvt_qk_block *out);

/* Dequantizes `cols` (a multiple of 256) weights of a row, by the formula
 * above with f32 products (llama.cpp's dequantize_row_* values). */
void kvt_qk_dequant_row(uint32_t type, const uint8_t *row, int64_t cols, float *out);

/* Q8_K activations, as llama.cpp's CPU backend makes them (quantize_row_q8_K):
 * per 256 values, m = the value of largest magnitude (the first one on ties),
 * iscale = -127/m, q = min(127, round-half-even(iscale * x)), d = 1/iscale;
 * bsums[g] = the sum of the 16 q of group g. An all-zero block gets d = 0,
 * q = 0, bsums = 0. k is a multiple of 256. */
void kvt_qk_quantize_acts(const float *x, int64_t k, int8_t *q, float *d, int16_t *bsums);

/* The canonical K-quant dot product (ops.h) of one weight row and one token's
 * Q8_K activations over k weights. */
float kvt_qk_dot(uint32_t type, const uint8_t *row, const int8_t *q, const float *d, const int16_t *bsums, int64_t k);

/* Quantizes n weights (a multiple of 256) to `type`, writing n/256 blocks.
 * Scales and mins are chosen per group by a weighted least-squares search
 * (quant_k_fit.c). Returns 0, or -1 if type is not a K type. */
int kvt_qk_quantize_row(uint32_t type, const float *x, int64_t n, uint8_t *out);

/* ---- packing helpers shared by the quantizer ---- */

/* Writes super-block `blk` from codes, integer scales/mins and the two f16
 * super-scales (bit patterns); the inverse of kvt_qk_unpack. */
void kvt_qk_pack(uint32_t type, const kvt_qk_block *b, uint16_t d, uint16_t dmin, uint8_t *blk);

/* llama.cpp's nearest_int: round half to even via the 1.5*2^23 trick
 * (valid for |f| < 2^22). */
#define KVT_QK_ROUND_MAGIC 12582912.0f /* 1.5 * 2^23: adding it leaves round(f) in the low mantissa bits */
#define KVT_QK_ROUND_MANT 0x007fffff
#define KVT_QK_ROUND_HALF 0x00400000
static inline int kvt_qk_round(float f) {
    float v = f + KVT_QK_ROUND_MAGIC;
    int32_t i;
    __builtin_memcpy(&i, &v, sizeof i);
    return (i & KVT_QK_ROUND_MANT) - KVT_QK_ROUND_HALF;
}

#endif
