// SPDX-License-Identifier: MIT
/* llama.cpp's legacy weight formats Q4_0, Q4_1, Q5_0 and Q5_1, and IQ4_NL (the
 * same 32-weight blocks with a non-linear 4-bit code book): block layouts,
 * dequantization, quantizers, and the scalar dot product that defines their
 * canonical numerics (ops.h). Also the file-format Q8_0 quantizer.
 *
 * Every format holds blocks of 32 weights, little-endian, packed without
 * padding (sizes in bytes):
 *   Q4_0 (18): f16 d, u8 qs[16]                 w = d * (q - 8)
 *   Q4_1 (20): f16 d, f16 m, u8 qs[16]          w = d * q + m
 *   Q5_0 (22): f16 d, u8 qh[4], u8 qs[16]       w = d * (q - 16)
 *   Q5_1 (24): f16 d, f16 m, u8 qh[4], u8 qs[16] w = d * q + m
 *   IQ4_NL (18): f16 d, u8 qs[16]               w = d * KVT_IQ4NL_VALUES[q]
 * Element j < 16 of a block takes the low nibble of qs[j], element j + 16 its
 * high nibble; for Q5, bit i of qh (read as a u32) is bit 4 of element i.
 * IQ4_NL's code q indexes 16 int8 values (ggml's kvalues_iq4nl, the format's
 * constants); llama.cpp writes it where a K-quant's rows are not a multiple
 * of 256 (Q2_K, Q3_K and IQ4_XS tensors of such shapes).
 *
 * The Q4_0..Q5_1 quantizers follow llama.cpp's reference rounding (its
 * quantize_row_*_ref, the path llama-quantize takes without an importance
 * matrix), so a tensor quantized here has the same bytes as one llama.cpp
 * quantized from the same f32 values. IQ4_NL's is kvtier's own (a scale
 * search, see quant_legacy.c), so its bytes are not llama-quantize's. */
#ifndef KVT_QUANT_LEGACY_H
#define KVT_QUANT_LEGACY_H

#include <stddef.h>
#include <stdint.h>

#include "types.h"

#define KVT_QL_BLOCK 32 /* weights per block, every legacy type */

/* Where the fields of one block sit, for the kernels. */
typedef struct {
    uint32_t bytes;  /* block size */
    int32_t m_off;   /* f16 min (Q4_1, Q5_1), else -1 */
    int32_t qh_off;  /* high bits (Q5_0, Q5_1), else -1 */
    uint32_t qs_off; /* the 16 nibble bytes */
    int32_t zero;    /* subtracted from q: 8 (Q4_0), 16 (Q5_0), 0 (_1 types), 128 (IQ4_NL) */
    int32_t nl;      /* IQ4_NL: the stored code c becomes q = KVT_IQ4NL_VALUES[c] + 128 (1..241,
                      * an unsigned byte), so that q - zero is the weight's value */
} kvt_ql_layout;

/* IQ4_NL's code book, and the same + 128 as the kernels' unsigned bytes. */
#define KVT_IQ4NL_VALUES \
    { -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113 }
#define KVT_IQ4NL_BIASED \
    { 1, 24, 45, 63, 79, 93, 106, 118, 129, 141, 153, 166, 181, 197, 217, 241 }

/* The five layouts, as initializers (the SIMD kernels specialise on them). */
#define KVT_QL_LAYOUT_Q4_0 \
    { 18, -1, -1, 2, 8, 0 }
#define KVT_QL_LAYOUT_Q4_1 \
    { 20, 2, -1, 4, 0, 0 }
#define KVT_QL_LAYOUT_Q5_0 \
    { 22, -1, 2, 6, 16, 0 }
#define KVT_QL_LAYOUT_Q5_1 \
    { 24, 2, 4, 8, 0, 0 }
#define KVT_QL_LAYOUT_IQ4_NL \
    { 18, -1, -1, 2, 128, 1 }

/* The layout of a legacy type, or NULL for any other type. */
const kvt_ql_layout *kvt_ql_layout_of(uint32_t type);
/* 0, 1, 2, 3, 4 for Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL; -1 for any other type. */
static inline int kvt_ql_index(uint32_t type) {
    switch (type) {
    case KVT_TYPE_Q4_0: return 0;
    case KVT_TYPE_Q4_1: return 1;
    case KVT_TYPE_Q5_0: return 2;
    case KVT_TYPE_Q5_1: return 3;
    case KVT_TYPE_IQ4_NL: return 4;
    default: return -1;
    }
}
/* True for Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL. */
static inline int kvt_ql_is_legacy(uint32_t type) { return kvt_ql_index(type) >= 0; }
/* True for the types with a min (Q4_1, Q5_1): their activations are Q8_1. */
static inline int kvt_ql_has_min(uint32_t type) { return type == KVT_TYPE_Q4_1 || type == KVT_TYPE_Q5_1; }

/* Unpacks the 32 quants of one block as q - zero (int8, natural order). */
void kvt_ql_unpack_block(const kvt_ql_layout *L, const uint8_t *blk, int8_t q[KVT_QL_BLOCK]);

/* out[0..n) = the weights of a row of n elements (n a multiple of 32), exactly
 * d * (q - zero) (+ m) in f32. */
void kvt_ql_dequant_row(uint32_t type, const uint8_t *row, float *out, int64_t n);

/* Quantizes n floats (a multiple of 32) into n / 32 blocks of type (a legacy
 * type or Q8_0) with llama.cpp's reference rounding. Returns 0, or -1 for
 * another type. */
int kvt_ql_quantize_row(uint32_t type, const float *x, uint8_t *out, int64_t n);

/* The canonical dot of one weight row with quantized activations (ops.h):
 * xq are the activation int8 values stored + KVT_Q8_ACT_BIAS, xd the block
 * scales and xs (Q4_1/Q5_1 only) the Q8_1 block sums, all zero padded to an
 * even block count; k is the row length (a multiple of 32). */
float kvt_ql_dot_scalar(uint32_t type, const uint8_t *row, const uint8_t *xq, const float *xd, const float *xs,
                        int64_t k);

#endif
